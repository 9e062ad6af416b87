// Hopper-v5 (gymnasium/envs/mujoco/hopper_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ----------------------------------------------------------------- Hopper --
// Walker2d-v5 differs only in its model, defaults and health check.
class Hopper : public MujocoTask<Hopper>, public Locomotion {
 public:
  static constexpr TaskTraits kTraits{"Hopper-v5", "hopper.xml", 4, 1000, 3800.0};

  static std::vector<OptionSpec> TaskOptions() {
    return SharedOptions(1e-3, /*state_range=*/true, 0.7, kInf, -0.2, 0.2);
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - detail::excluded(o, 1);
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 3, "Hopper-v5/Walker2d-v5 need a model with nq >= 3");
  }
  static const auto& info_fields() {
    using L = LocomotionInfo<Hopper>;
    static constexpr Field kFields[] = {
        L::x_position, scalar("z_distance_from_origin", &Hopper::z_distance_), L::x_velocity,
        L::reward_forward, L::reward_ctrl, L::reward_survive};
    return kFields;
  }

  explicit Hopper(const EnvOptions& o, bool walker = false)
      : MujocoTask(o, scaled_noise(o, Noise::kUniform)),
        Locomotion(o),
        walker_(walker),
        health_(o),
        state_min_(walker ? 0.0 : o.f("healthy_state_min")),
        state_max_(walker ? 0.0 : o.f("healthy_state_max")),
        angle_min_(o.f("healthy_angle_min")),
        angle_max_(o.f("healthy_angle_max")) {
    obs_skip_ = detail::excluded(o, 1);
    obs_vel_clip_ = 10.0;
  }

 protected:
  // The options of Hopper and Walker2d, with the defaults that differ; only
  // Hopper has healthy_state_range.
  static std::vector<OptionSpec> SharedOptions(double ctrl_w, bool state_range, double z_min,
                                               double z_max, double angle_min, double angle_max) {
    std::vector<OptionSpec> v = {detail::weight_option("forward_reward", 1.0, "forward reward"),
                                 detail::weight_option("ctrl_cost", ctrl_w, "control cost"),
                                 detail::healthy_reward_option(1.0), detail::terminate_option()};
    if (state_range) {
      detail::add_range(v, "healthy_state", -100.0, 100.0, "bound of qpos[2:] and qvel");
    }
    detail::add_range(v, "healthy_z", z_min, z_max, "bound of the torso height");
    detail::add_range(v, "healthy_angle", angle_min, angle_max, "torso angle bound");
    v.push_back(detail::noise_option(5e-3));
    v.push_back(detail::exclude_option());
    return v;
  }

  bool is_healthy() const {
    const double z = d_->qpos[1], angle = d_->qpos[2];
    const bool healthy_z = health_.z_min < z && z < health_.z_max;
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

  void set_reset_info() override {
    x_position = d_->qpos[0];
    z_distance_ = d_->qpos[1] - init_qpos_[1];
  }
  StepResult step_task(const double* action, double* obs) override {
    const double x_before = d_->qpos[0];
    do_simulation(action);
    const double ctrl_cost = forward_and_ctrl(velocity(x_before, d_->qpos[0]), action, m_->nu);
    write_obs(obs);
    set_reset_info();  // the position entries, after the step
    return healthy_step(is_healthy(), health_, ctrl_cost);
  }

  bool walker_;
  Health health_;
  double state_min_, state_max_, angle_min_, angle_max_;
  double z_distance_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
