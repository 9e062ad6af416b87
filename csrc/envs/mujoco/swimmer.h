// Swimmer-v5 (gymnasium/envs/mujoco/swimmer_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ---------------------------------------------------------------- Swimmer --
class Swimmer : public MujocoEnv {
 public:
  static constexpr const char* kId = "Swimmer-v5";
  static constexpr const char* kXml = "swimmer.xml";
  static constexpr int kFrameSkip = 4;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 360.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 1e-4, "weight of the control cost", true),
            detail::noise_option(0.1), detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - (detail::flag(o, "exclude_current_positions_from_observation") ? 2 : 0);
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("x_position"), f64_scalar("y_position"), f64_scalar("distance_from_origin"),
            f64_scalar("x_velocity"), f64_scalar("y_velocity"), f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 2, "Swimmer-v5 needs a model with nq >= 2");
  }

  explicit Swimmer(const EnvOptions& o)
      : MujocoEnv(o),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        noise_(o.f("reset_noise_scale")),
        exclude_(o.b("exclude_current_positions_from_observation")) {}

 protected:
  enum : size_t { kX = kTaskInfo, kY, kDist, kXVel, kYVel, kRewForward, kRewCtrl, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    const int skip = exclude_ ? 2 : 0;
    w.copy(d_->qpos + skip, m_->nq - skip);
    w.copy(d_->qvel, m_->nv);
  }
  void write_reset_info(const Row& out) const override {
    zero_infos(out, kTaskInfo, kEnd);
    *info(out, kX) = d_->qpos[0];
    *info(out, kY) = d_->qpos[1];
    *info(out, kDist) = norm(d_->qpos, 2);
  }
  StepResult step_task(const double* action, const Row& out) override {
    const double x_before = d_->qpos[0], y_before = d_->qpos[1];
    do_simulation(action);
    const double x_after = d_->qpos[0], y_after = d_->qpos[1];
    const double x_velocity = (x_after - x_before) / dt_;
    const double y_velocity = (y_after - y_before) / dt_;
    write_obs(out.obs<double>());
    const double forward_reward = forward_w_ * x_velocity;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(action, m_->nu);
    StepResult r;
    r.reward = forward_reward - ctrl_cost;
    *info(out, kX) = x_after;
    *info(out, kY) = y_after;
    const double xy[2] = {x_after, y_after};
    *info(out, kDist) = norm(xy, 2);
    *info(out, kXVel) = x_velocity;
    *info(out, kYVel) = y_velocity;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    return r;
  }

  double forward_w_, ctrl_w_, noise_;
  bool exclude_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
