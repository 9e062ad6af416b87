// Reacher-v5 (gymnasium/envs/mujoco/reacher_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <cmath>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ---------------------------------------------------------------- Reacher --
class Reacher : public MujocoTask<Reacher> {
 public:
  static constexpr TaskTraits kTraits{"Reacher-v5", "reacher.xml", 2, 50, -3.75};

  static std::vector<OptionSpec> TaskOptions() {
    return {detail::weight_option("reward_dist", 1.0, "fingertip-to-target distance"),
            detail::weight_option("reward_control", 1.0, "control cost")};
  }
  static int64_t ObsSize(const ModelInfo&, const Options&) { return 10; }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq == 4 && i.nv >= 2,
                 "Reacher-v5 needs a model with 2 arm joints and a 2-D target");
  }
  static const auto& info_fields() {
    static constexpr Field kFields[] = {scalar("reward_dist", &Reacher::reward_dist_),
                                        scalar("reward_ctrl", &Reacher::reward_ctrl_)};
    return kFields;
  }

  // Fixed noise scales (Reacher-v5 has no reset_noise_scale); the target's
  // two joints (the last qvel entries) start still.
  explicit Reacher(const EnvOptions& o)
      : MujocoTask(o, ResetNoise{Noise::kUniform, 0.1, Noise::kUniform, 0.005, 2}),
        dist_w_(o.f("reward_dist_weight")),
        ctrl_w_(o.f("reward_control_weight")),
        fingertip_(body_id("fingertip")),
        target_(body_id("target")) {}

 protected:
  // A target inside the disc of radius 0.2.
  void place_targets(Rng& rng) override {
    detail::draw_target(rng, -0.2, 0.2, -0.2, 0.2, [](double r) { return r < 0.2; },
                        d_->qpos + m_->nq - 2);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(std::cos(d_->qpos[0]));
    w.put(std::cos(d_->qpos[1]));
    w.put(std::sin(d_->qpos[0]));
    w.put(std::sin(d_->qpos[1]));
    w.copy(d_->qpos + 2, m_->nq - 2);
    w.copy(d_->qvel, 2);
    const double* f = d_->xpos + 3 * fingertip_;
    const double* t = d_->xpos + 3 * target_;
    w.put(f[0] - t[0]);
    w.put(f[1] - t[1]);
  }
  StepResult step_task(const double* action, double* obs) override {
    do_simulation(action);
    write_obs(obs);
    const double* f = d_->xpos + 3 * fingertip_;
    const double* t = d_->xpos + 3 * target_;
    const double vec[3] = {f[0] - t[0], f[1] - t[1], f[2] - t[2]};
    reward_dist_ = -norm(vec, 3) * dist_w_;
    reward_ctrl_ = -np_sum_sq(action, m_->nu) * ctrl_w_;
    StepResult r;
    r.reward = reward_dist_ + reward_ctrl_;
    return r;
  }

  double dist_w_, ctrl_w_;
  int fingertip_, target_;
  double reward_dist_ = 0, reward_ctrl_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
