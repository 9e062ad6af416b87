// HalfCheetah-v5 (gymnasium/envs/mujoco/half_cheetah_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ------------------------------------------------------------ HalfCheetah --
class HalfCheetah : public MujocoTask<HalfCheetah>, public Locomotion {
 public:
  static constexpr TaskTraits kTraits{"HalfCheetah-v5", "half_cheetah.xml", 5, 1000, 4800.0};

  static std::vector<OptionSpec> TaskOptions() {
    return {detail::weight_option("forward_reward", 1.0, "forward reward"),
            detail::weight_option("ctrl_cost", 0.1, "control cost"), detail::noise_option(0.1),
            detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - detail::excluded(o, 1);
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 1, "HalfCheetah-v5 needs a model with nq >= 1");
  }
  static const auto& info_fields() {
    using L = LocomotionInfo<HalfCheetah>;
    static constexpr Field kFields[] = {L::x_position, L::x_velocity, L::reward_forward,
                                        L::reward_ctrl};
    return kFields;
  }

  explicit HalfCheetah(const EnvOptions& o)
      : MujocoTask(o, scaled_noise(o, Noise::kNormal)),
        Locomotion(o) {
    obs_skip_ = detail::excluded(o, 1);
  }

 protected:
  void set_reset_info() override { x_position = d_->qpos[0]; }
  StepResult step_task(const double* action, double* obs) override {
    const double x_before = d_->qpos[0];
    do_simulation(action);
    x_position = d_->qpos[0];
    const double ctrl_cost = forward_and_ctrl(velocity(x_before, x_position), action, m_->nu);
    write_obs(obs);
    StepResult r;
    r.reward = reward_forward - ctrl_cost;
    return r;
  }
};

}  // namespace mujoco_envs
}  // namespace torchfrag
