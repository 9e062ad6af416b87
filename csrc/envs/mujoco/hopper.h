// Hopper-v5 (gymnasium/envs/mujoco/hopper_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ----------------------------------------------------------------- Hopper --
// Walker2d-v5 differs only in its model, defaults and health check.
class Hopper : public MujocoEnv {
 public:
  static constexpr const char* kId = "Hopper-v5";
  static constexpr const char* kXml = "hopper.xml";
  static constexpr int kFrameSkip = 4;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 3800.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 1e-3, "weight of the control cost", true),
            opt_float("healthy_reward", 1.0, "reward per step while healthy", true),
            opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy"),
            opt_float("healthy_state_min", -100.0,
                      "healthy_state_range[0]: lower bound of qpos[2:] and qvel", true),
            opt_float("healthy_state_max", 100.0,
                      "healthy_state_range[1]: upper bound of qpos[2:] and qvel", true),
            opt_float("healthy_z_min", 0.7, "healthy_z_range[0]: lower bound of the torso height",
                      true),
            opt_float("healthy_z_max", kInf,
                      "healthy_z_range[1]: upper bound of the torso height", true),
            opt_float("healthy_angle_min", -0.2, "healthy_angle_range[0]: lower torso angle bound",
                      true),
            opt_float("healthy_angle_max", 0.2, "healthy_angle_range[1]: upper torso angle bound",
                      true),
            detail::noise_option(5e-3), detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - (detail::flag(o, "exclude_current_positions_from_observation") ? 1 : 0);
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("x_position"),     f64_scalar("z_distance_from_origin"),
            f64_scalar("x_velocity"),     f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl"),    f64_scalar("reward_survive")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 3, "Hopper-v5/Walker2d-v5 need a model with nq >= 3");
  }

  explicit Hopper(const EnvOptions& o, bool walker = false)
      : MujocoEnv(o),
        walker_(walker),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        healthy_reward_(o.f("healthy_reward")),
        terminate_(o.b("terminate_when_unhealthy")),
        state_min_(walker ? 0.0 : o.f("healthy_state_min")),
        state_max_(walker ? 0.0 : o.f("healthy_state_max")),
        z_min_(o.f("healthy_z_min")),
        z_max_(o.f("healthy_z_max")),
        angle_min_(o.f("healthy_angle_min")),
        angle_max_(o.f("healthy_angle_max")),
        noise_(o.f("reset_noise_scale")),
        exclude_(o.b("exclude_current_positions_from_observation")) {}

 protected:
  enum : size_t { kX = kTaskInfo, kZDist, kXVel, kRewForward, kRewCtrl, kRewSurvive, kEnd };

  bool is_healthy() const {
    const double z = d_->qpos[1], angle = d_->qpos[2];
    const bool healthy_z = z_min_ < z && z < z_max_;
    const bool healthy_angle = angle_min_ < angle && angle < angle_max_;
    if (walker_) return healthy_z && healthy_angle;
    // state_vector()[2:]: qpos[2:] then all of qvel, strictly inside the range.
    bool healthy_state = true;
    for (int k = 2; k < m_->nq; ++k) {
      const double s = d_->qpos[k];
      healthy_state = healthy_state && state_min_ < s && s < state_max_;
    }
    for (int k = 0; k < m_->nv; ++k) {
      const double s = d_->qvel[k];
      healthy_state = healthy_state && state_min_ < s && s < state_max_;
    }
    return healthy_state && healthy_z && healthy_angle;
  }

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    const int skip = exclude_ ? 1 : 0;
    w.copy(d_->qpos + skip, m_->nq - skip);
    w.copy_clipped(d_->qvel, m_->nv, -10.0, 10.0);
  }
  void write_reset_info(const Row& out) const override {
    zero_infos(out, kTaskInfo, kEnd);
    *info(out, kX) = d_->qpos[0];
    *info(out, kZDist) = d_->qpos[1] - init_qpos_[1];
  }
  StepResult step_task(const double* action, const Row& out) override {
    const double x_before = d_->qpos[0];
    do_simulation(action);
    const double x_after = d_->qpos[0];
    const double x_velocity = (x_after - x_before) / dt_;
    write_obs(out.obs<double>());
    const bool healthy = is_healthy();
    const double forward_reward = forward_w_ * x_velocity;
    const double healthy_reward = healthy ? healthy_reward_ : 0.0;
    const double rewards = forward_reward + healthy_reward;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(action, m_->nu);
    StepResult r;
    r.reward = rewards - ctrl_cost;
    r.terminated = !healthy && terminate_;
    *info(out, kX) = x_after;
    *info(out, kZDist) = d_->qpos[1] - init_qpos_[1];
    *info(out, kXVel) = x_velocity;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    *info(out, kRewSurvive) = healthy_reward;
    return r;
  }

  bool walker_;
  double forward_w_, ctrl_w_, healthy_reward_;
  bool terminate_;
  double state_min_, state_max_, z_min_, z_max_, angle_min_, angle_max_, noise_;
  bool exclude_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
