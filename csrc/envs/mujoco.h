// MuJoCo tasks: Gymnasium's v5 locomotion and manipulation tasks in C++.
//
// One family serves every id (Ant-v5, HalfCheetah-v5, Hopper-v5, Humanoid-v5,
// HumanoidStandup-v5, InvertedDoublePendulum-v5, InvertedPendulum-v5,
// Pusher-v5, Reacher-v5, Swimmer-v5, Walker2d-v5).  This header only declares
// it, so that register.cpp does not need MuJoCo's headers; the tasks live in
// mujoco_env.h (shared base and model cache), mujoco_tasks.h (one class per
// task) and mujoco.cpp (the family).
//
// Conventions (see mujoco_env.h for the details):
// * Options carry Gymnasium's constructor argument names; a Gymnasium tuple
//   option `X_range=(lo, hi)` becomes two options `X_min` and `X_max`
//   (`healthy_z_range` -> `healthy_z_min`/`healthy_z_max`, as EnvPool names
//   them).  Ant's `main_body` is a string: a body name or a body index.
// * `xml_file` is resolved like Gymnasium does, relative to the folder named by
//   TORCHFRAG_MUJOCO_ASSETS (set by torchfrag/_preload/mujoco.py to the
//   installed gymnasium's envs/mujoco/assets) unless it starts with '/', '.'
//   or '~'.
// * Observations are float64.  Infos are Gymnasium's info entries (zero at
//   reset where Gymnasium's reset info lacks them) plus `qpos0`/`qvel0`: the
//   joint state the current episode started from, written at reset and
//   repeated at every step of the episode, so a reference can be synced.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../env.h"

namespace torchfrag {
namespace mujoco_envs {

class MujocoFamily : public EnvFamily {
 public:
  std::vector<std::string> ids() const override;
  EnvSpec spec(const std::string& id, const Options* options) const override;
  std::unique_ptr<Env> make(const std::string& id, const EnvSpec& spec,
                            const EnvOptions& options) const override;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
