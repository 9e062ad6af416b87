// Debug-v0: a transparent env for tests and benchmarks.
//
// Its observation says who it is and where it is (env index, step within the
// episode, last action, episode count), so tests can check routing and
// ordering of async results.  Options make it fail on demand (to test error
// propagation) or sleep in step (standing in for an expensive simulator; the
// sleep happens in C++ with the GIL released).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "../env.h"

namespace torchfrag {

class DebugEnv : public Env {
 public:
  static EnvSpec Spec(const Options* o) {
    EnvSpec s;
    const int64_t dim = o ? static_cast<int64_t>(o->num("obs_dim")) : 4;
    if (dim < 4) throw std::invalid_argument("Debug-v0 obs_dim must be >= 4, got " + std::to_string(dim));
    const int64_t n = o ? static_cast<int64_t>(o->num("num_actions")) : 2;
    if (n < 1) throw std::invalid_argument("Debug-v0 num_actions must be >= 1");
    s.obs.name = "obs";
    s.obs.dtype = DType::kFloat32;
    s.obs.shape = {dim};
    s.action = discrete_action(n);
    s.max_episode_steps = 0;
    ArraySpec episode;
    episode.name = "episode";
    episode.dtype = DType::kInt64;
    s.infos = {episode};
    s.options = {
        in_range(opt_int("obs_dim", 4, "observation size (>= 4)"), 4, kMaxIntOption),
        in_range(opt_int("num_actions", 2, "number of discrete actions"), 1, kMaxIntOption),
        in_range(opt_int("episode_length", 10, "steps until `terminated` (0: never)", true), 0,
                 kMaxIntOption),
        in_range(opt_int("fail_on_step", 0, "raise inside step number k of an episode (0: never)",
                         true), 0, kMaxIntOption),
        opt_bool("fail_on_reset", false, "raise inside reset"),
        in_range(opt_int("fail_on_make", 0, "1: raise in the env's constructor (on its worker thread)",
                         true), 0, 1),
        // At most an hour per step: a larger value is a typo, and far larger ones overflow.
        in_range(opt_float("step_sleep_us", 0.0, "sleep this long in every step (GIL released)",
                           true), 0.0, 3.6e9),
    };
    return s;
  }

  DebugEnv(const EnvSpec& spec, const EnvOptions& o)
      : index_(o.env_index()),
        dim_(spec.obs.shape[0]),
        episode_length_(o.i("episode_length")),
        fail_on_step_(o.i("fail_on_step")),
        fail_on_reset_(o.b("fail_on_reset")),
        sleep_us_(o.f("step_sleep_us")) {
    if (o.i("fail_on_make") != 0) {
      throw std::invalid_argument("Debug-v0 env " + std::to_string(index_) +
                                  " was asked to fail in its constructor (fail_on_make=1)");
    }
  }

  void reset(Rng& rng, const Row& out) override {
    if (fail_on_reset_) throw std::runtime_error("Debug-v0 was asked to fail on reset");
    ++episode_;
    t_ = 0;
    last_action_ = -1;
    noise_ = static_cast<float>(rng.uniform());
    write(out);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    ++t_;
    if (fail_on_step_ > 0 && t_ == fail_on_step_) {
      throw std::runtime_error("Debug-v0 was asked to fail on step " + std::to_string(t_));
    }
    if (sleep_us_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(sleep_us_));
    }
    last_action_ = a.discrete;
    noise_ = static_cast<float>(rng.uniform());
    write(out);
    StepResult r;
    r.reward = static_cast<double>(a.discrete);
    r.terminated = episode_length_ > 0 && t_ >= episode_length_;
    return r;
  }

 private:
  void write(const Row& out) const {
    float* obs = out.obs<float>();
    obs[0] = static_cast<float>(index_);
    obs[1] = static_cast<float>(t_);
    obs[2] = static_cast<float>(last_action_);
    obs[3] = static_cast<float>(episode_);
    for (int64_t k = 4; k < dim_; ++k) obs[k] = noise_;
    *out.info<int64_t>(0) = episode_;
  }

  int64_t index_, dim_, episode_length_, fail_on_step_;
  bool fail_on_reset_;
  double sleep_us_;
  int64_t t_ = 0, last_action_ = -1, episode_ = 0;
  float noise_ = 0.0f;
};

}  // namespace torchfrag
