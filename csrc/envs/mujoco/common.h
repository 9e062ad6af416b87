// Helpers shared by the MuJoCo task headers in this folder (one task each).
#pragma once

#include <string>
#include <vector>

#include "../mujoco_env.h"

namespace torchfrag {
namespace mujoco_envs {

namespace detail {

inline bool flag(const Options& o, const char* name) { return o.num(name) != 0.0; }

inline void need(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// Gymnasium's "exclude_current_positions_from_observation" option.
inline OptionSpec exclude_option() {
  return opt_bool("exclude_current_positions_from_observation", true,
                  "leave the x (and y) position of the root out of the observation");
}
inline OptionSpec noise_option(double def) {
  return opt_float("reset_noise_scale", def,
                   "scale of the random perturbation of the initial state", true);
}

}  // namespace detail

}  // namespace mujoco_envs
}  // namespace torchfrag
