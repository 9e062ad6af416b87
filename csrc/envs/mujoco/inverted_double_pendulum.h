// InvertedDoublePendulum-v5 (gymnasium/envs/mujoco/inverted_double_pendulum_v5.py); see
// ../mujoco_tasks.h for what every task class provides.
#pragma once

#include <cmath>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ------------------------------------------------- InvertedDoublePendulum --
class InvertedDoublePendulum : public MujocoTask<InvertedDoublePendulum> {
 public:
  static constexpr TaskTraits kTraits{"InvertedDoublePendulum-v5", "inverted_double_pendulum.xml",
                                      5, 1000, 9100.0};

  static std::vector<OptionSpec> TaskOptions() {
    return {detail::healthy_reward_option(10.0, "reward per step while the tip is up"),
            detail::noise_option(0.1)};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options&) {
    return 1 + 2 * static_cast<int64_t>(i.nq - 1) + i.nv + 1;
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 1 && i.nv >= 3 && i.nsite >= 1,
                 "InvertedDoublePendulum-v5 needs a model with nv >= 3 and a site");
  }
  static const auto& info_fields() {
    static constexpr Field kFields[] = {
        scalar("reward_survive", &InvertedDoublePendulum::reward_survive_),
        scalar("distance_penalty", &InvertedDoublePendulum::distance_penalty_),
        scalar("velocity_penalty", &InvertedDoublePendulum::velocity_penalty_)};
    return kFields;
  }

  explicit InvertedDoublePendulum(const EnvOptions& o)
      : MujocoTask(o, scaled_noise(o, Noise::kNormal)), healthy_reward_(o.f("healthy_reward")) {}

 protected:
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(d_->qpos[0]);
    for (int k = 1; k < m_->nq; ++k) w.put(std::sin(d_->qpos[k]));
    for (int k = 1; k < m_->nq; ++k) w.put(std::cos(d_->qpos[k]));
    w.copy_clipped(d_->qvel, m_->nv, -10.0, 10.0);
    w.put(clip(d_->qfrc_constraint[0], -10.0, 10.0));
  }
  StepResult step_task(const double* action, double* obs) override {
    do_simulation(action);
    const double x = d_->site_xpos[0], y = d_->site_xpos[2];
    write_obs(obs);
    StepResult r;
    r.terminated = y <= 1;
    const double v1 = d_->qvel[1], v2 = d_->qvel[2];
    const double dist_penalty = 0.01 * (x * x) + (y - 2) * (y - 2);
    const double vel_penalty = 0.001 * (v1 * v1) + 0.005 * (v2 * v2);
    reward_survive_ = healthy_reward_ * (r.terminated ? 0.0 : 1.0);
    r.reward = reward_survive_ - dist_penalty - vel_penalty;
    distance_penalty_ = -dist_penalty;
    velocity_penalty_ = -vel_penalty;
    return r;
  }

  double healthy_reward_;
  double reward_survive_ = 0, distance_penalty_ = 0, velocity_penalty_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
