// HumanoidStandup-v5 (gymnasium/envs/mujoco/humanoid_standup_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <vector>

#include "common.h"
#include "humanoid.h"

namespace torchfrag {
namespace mujoco_envs {

// -------------------------------------------------------- HumanoidStandup --
class HumanoidStandup : public HumanoidTask<HumanoidStandup> {
 public:
  static constexpr TaskTraits kTraits{"HumanoidStandup-v5", "humanoidstandup.xml", 5, 1000, kInf};

  static std::vector<OptionSpec> TaskOptions() {
    std::vector<OptionSpec> v = {
        detail::weight_option("uph_cost", 1.0,
                              "upward reward; accepted but unused, as in Gymnasium 1.x"),
        detail::weight_option("ctrl_cost", 0.1, "control cost"),
        detail::weight_option("impact_cost", 5e-7, "impact (contact) cost")};
    detail::add_range(v, "impact_cost", -kInf, 10.0, "clip of the impact cost");
    v.push_back(detail::noise_option(1e-2));
    AddObsOptions(v);
    return v;
  }
  static const auto& info_fields() {
    static constexpr Field kFields[] = {
        scalar("x_position", &HumanoidStandup::x_position_),
        scalar("y_position", &HumanoidStandup::y_position_),
        scalar("z_distance_from_origin", &HumanoidStandup::z_distance_),
        tendon_length(),
        tendon_velocity(),
        scalar("reward_linup", &HumanoidStandup::reward_linup_),
        scalar("reward_quadctrl", &HumanoidStandup::reward_quadctrl_),
        scalar("reward_impact", &HumanoidStandup::reward_impact_)};
    return kFields;
  }

  explicit HumanoidStandup(const EnvOptions& o)
      : HumanoidTask(o),
        ctrl_w_(o.f("ctrl_cost_weight")),
        impact_w_(o.f("impact_cost_weight")),
        impact_min_(o.f("impact_cost_min")),
        impact_max_(o.f("impact_cost_max")) {}

 protected:
  void set_reset_info() override {
    x_position_ = d_->qpos[0];
    y_position_ = d_->qpos[1];
    z_distance_ = d_->qpos[2] - init_qpos_[2];
  }
  StepResult step_task(const double* action, double* obs) override {
    do_simulation(action);
    const double pos_after = d_->qpos[2];
    // Gymnasium 1.x divides by the timestep and never applies uph_cost_weight.
    const double uph_cost = (pos_after - 0) / m_->opt.timestep;
    const double quad_ctrl_cost = ctrl_w_ * np_sum_sq(d_->ctrl, m_->nu);
    const double quad_impact_cost = contact_cost(impact_w_, impact_min_, impact_max_);
    StepResult r;
    r.reward = uph_cost - quad_ctrl_cost - quad_impact_cost + 1;
    set_reset_info();  // the position entries, after the step
    reward_linup_ = uph_cost;
    reward_quadctrl_ = -quad_ctrl_cost;
    reward_impact_ = -quad_impact_cost;
    write_obs(obs);
    return r;
  }

  double ctrl_w_, impact_w_, impact_min_, impact_max_;
  double x_position_ = 0, y_position_ = 0, z_distance_ = 0, reward_linup_ = 0,
         reward_quadctrl_ = 0, reward_impact_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
