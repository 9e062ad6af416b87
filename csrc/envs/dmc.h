// DeepMind Control Suite tasks (dm_control 1.0.50's suite) in C++, on the
// MuJoCo the pool already links.
//
// One family serves every id (CartpoleBalance-v1, CheetahRun-v1, ...: EnvPool's
// names).  This header only declares it, so that register.cpp does not need
// MuJoCo's headers; the shared base lives in dmc_env.h, the tasks in dmc/ and
// the family in dmc.cpp.
//
// Conventions (see dmc_env.h):
// * The suite's XML files are read from the folder named by
//   TORCHFRAG_DMC_ASSETS (set by torchfrag/_preload/mujoco.py to the installed
//   dm_control's suite folder unless the user set it).
// * Observations are dm_control's ordered dict flattened in key order,
//   float64; rewards in [0, 1]; 1000 steps then truncation (discount 1).
// * Infos `qpos0`/`qvel0` (and `target0` where the task places a target in
//   the model) give the state an episode started from, so a reference can be
//   synced to it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../env.h"

namespace torchfrag {
namespace dmc {

class DmcFamily : public EnvFamily {
 public:
  std::vector<std::string> ids() const override;
  EnvSpec spec(const std::string& id, const Options* options) const override;
  std::unique_ptr<Env> make(const std::string& id, const EnvSpec& spec,
                            const EnvOptions& options) const override;
};

}  // namespace dmc
}  // namespace torchfrag
