// InvertedDoublePendulum-v5 (gymnasium/envs/mujoco/inverted_double_pendulum_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ------------------------------------------------- InvertedDoublePendulum --
class InvertedDoublePendulum : public MujocoEnv {
 public:
  static constexpr const char* kId = "InvertedDoublePendulum-v5";
  static constexpr const char* kXml = "inverted_double_pendulum.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 9100.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("healthy_reward", 10.0, "reward per step while the tip is up", true),
            detail::noise_option(0.1)};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options&) {
    return 1 + 2 * static_cast<int64_t>(i.nq - 1) + i.nv + 1;
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("reward_survive"), f64_scalar("distance_penalty"),
            f64_scalar("velocity_penalty")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 1 && i.nv >= 3 && i.nsite >= 1,
                 "InvertedDoublePendulum-v5 needs a model with nv >= 3 and a site");
  }

  explicit InvertedDoublePendulum(const EnvOptions& o)
      : MujocoEnv(o), healthy_reward_(o.f("healthy_reward")), noise_(o.f("reset_noise_scale")) {}

 protected:
  enum : size_t { kRewSurvive = kTaskInfo, kDistPenalty, kVelPenalty, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_normal(d_->qvel, init_qvel_, m_->nv, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(d_->qpos[0]);
    for (int k = 1; k < m_->nq; ++k) w.put(std::sin(d_->qpos[k]));
    for (int k = 1; k < m_->nq; ++k) w.put(std::cos(d_->qpos[k]));
    w.copy_clipped(d_->qvel, m_->nv, -10.0, 10.0);
    w.put(clip(d_->qfrc_constraint[0], -10.0, 10.0));
  }
  void write_reset_info(const Row& out) const override { zero_infos(out, kTaskInfo, kEnd); }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    const double x = d_->site_xpos[0], y = d_->site_xpos[2];
    write_obs(out.obs<double>());
    StepResult r;
    r.terminated = y <= 1;
    const double v1 = d_->qvel[1], v2 = d_->qvel[2];
    const double dist_penalty = 0.01 * (x * x) + (y - 2) * (y - 2);
    const double vel_penalty = 0.001 * (v1 * v1) + 0.005 * (v2 * v2);
    const double alive_bonus = healthy_reward_ * (r.terminated ? 0.0 : 1.0);
    r.reward = alive_bonus - dist_penalty - vel_penalty;
    *info(out, kRewSurvive) = alive_bonus;
    *info(out, kDistPenalty) = -dist_penalty;
    *info(out, kVelPenalty) = -vel_penalty;
    return r;
  }

  double healthy_reward_, noise_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
