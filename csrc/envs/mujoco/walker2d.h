// Walker2d-v5 (gymnasium/envs/mujoco/walker2d_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <vector>

#include "common.h"
#include "hopper.h"

namespace torchfrag {
namespace mujoco_envs {

// --------------------------------------------------------------- Walker2d --
class Walker2d : public Hopper {
 public:
  static constexpr TaskTraits kTraits{"Walker2d-v5", "walker2d_v5.xml", 4, 1000, kInf};

  static std::vector<OptionSpec> TaskOptions() {
    return SharedOptions(1e-3, /*state_range=*/false, 0.8, 2.0, -1.0, 1.0);
  }

  explicit Walker2d(const EnvOptions& o) : Hopper(o, true) {}
};

}  // namespace mujoco_envs
}  // namespace torchfrag
