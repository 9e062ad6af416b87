// Walker2d-v5 (gymnasium/envs/mujoco/walker2d_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"
#include "hopper.h"

namespace torchfrag {
namespace mujoco_envs {

// --------------------------------------------------------------- Walker2d --
class Walker2d : public Hopper {
 public:
  static constexpr const char* kId = "Walker2d-v5";
  static constexpr const char* kXml = "walker2d_v5.xml";
  static constexpr int kFrameSkip = 4;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = kInf;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 1e-3, "weight of the control cost", true),
            opt_float("healthy_reward", 1.0, "reward per step while healthy", true),
            opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy"),
            opt_float("healthy_z_min", 0.8, "healthy_z_range[0]: lower bound of the torso height",
                      true),
            opt_float("healthy_z_max", 2.0, "healthy_z_range[1]: upper bound of the torso height",
                      true),
            opt_float("healthy_angle_min", -1.0, "healthy_angle_range[0]: lower torso angle bound",
                      true),
            opt_float("healthy_angle_max", 1.0, "healthy_angle_range[1]: upper torso angle bound",
                      true),
            detail::noise_option(5e-3), detail::exclude_option()};
  }

  explicit Walker2d(const EnvOptions& o) : Hopper(o, true) {}
};

}  // namespace mujoco_envs
}  // namespace torchfrag
