// InvertedPendulum-v5 (gymnasium/envs/mujoco/inverted_pendulum_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ------------------------------------------------------- InvertedPendulum --
class InvertedPendulum : public MujocoEnv {
 public:
  static constexpr const char* kId = "InvertedPendulum-v5";
  static constexpr const char* kXml = "inverted_pendulum.xml";
  static constexpr int kFrameSkip = 2;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 950.0;

  static std::vector<OptionSpec> TaskOptions() { return {detail::noise_option(0.01)}; }
  static int64_t ObsSize(const ModelInfo& i, const Options&) { return i.nq + i.nv; }
  static std::vector<ArraySpec> Infos(const ModelInfo&) { return {f64_scalar("reward_survive")}; }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq + i.nv >= 2, "InvertedPendulum-v5 needs a model with nq + nv >= 2");
  }

  explicit InvertedPendulum(const EnvOptions& o)
      : MujocoEnv(o), noise_(o.f("reset_noise_scale")) {}

 protected:
  enum : size_t { kRewSurvive = kTaskInfo, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, m_->nq);
    w.copy(d_->qvel, m_->nv);
  }
  void write_reset_info(const Row& out) const override { zero_infos(out, kTaskInfo, kEnd); }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    double* obs = out.obs<double>();
    write_obs(obs);
    const int n = m_->nq + m_->nv;
    bool finite = true;
    for (int k = 0; k < n; ++k) finite = finite && std::isfinite(obs[k]);
    StepResult r;
    r.terminated = !finite || std::fabs(obs[1]) > 0.2;
    r.reward = r.terminated ? 0.0 : 1.0;
    *info(out, kRewSurvive) = r.reward;
    return r;
  }

  double noise_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
