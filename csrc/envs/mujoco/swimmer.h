// Swimmer-v5 (gymnasium/envs/mujoco/swimmer_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ---------------------------------------------------------------- Swimmer --
class Swimmer : public MujocoTask<Swimmer>, public Locomotion {
 public:
  static constexpr TaskTraits kTraits{"Swimmer-v5", "swimmer.xml", 4, 1000, 360.0};

  static std::vector<OptionSpec> TaskOptions() {
    return {detail::weight_option("forward_reward", 1.0, "forward reward"),
            detail::weight_option("ctrl_cost", 1e-4, "control cost"), detail::noise_option(0.1),
            detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - detail::excluded(o, 2);
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 2, "Swimmer-v5 needs a model with nq >= 2");
  }
  static const auto& info_fields() {
    using L = LocomotionInfo<Swimmer>;
    static constexpr Field kFields[] = {L::x_position, L::y_position, L::distance_from_origin,
                                        L::x_velocity, L::y_velocity, L::reward_forward,
                                        L::reward_ctrl};
    return kFields;
  }

  explicit Swimmer(const EnvOptions& o)
      : MujocoTask(o, scaled_noise(o, Noise::kUniform)),
        Locomotion(o) {
    obs_skip_ = detail::excluded(o, 2);
  }

 protected:
  void set_reset_info() override { set_planar_position(d_->qpos); }
  StepResult step_task(const double* action, double* obs) override {
    const double x_before = d_->qpos[0], y_before = d_->qpos[1];
    do_simulation(action);
    y_velocity = velocity(y_before, d_->qpos[1]);
    const double ctrl_cost = forward_and_ctrl(velocity(x_before, d_->qpos[0]), action, m_->nu);
    write_obs(obs);
    set_planar_position(d_->qpos);
    StepResult r;
    r.reward = reward_forward - ctrl_cost;
    return r;
  }
};

}  // namespace mujoco_envs
}  // namespace torchfrag
