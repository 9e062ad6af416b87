// InvertedPendulum-v5 (gymnasium/envs/mujoco/inverted_pendulum_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <cmath>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ------------------------------------------------------- InvertedPendulum --
class InvertedPendulum : public MujocoTask<InvertedPendulum> {
 public:
  static constexpr TaskTraits kTraits{"InvertedPendulum-v5", "inverted_pendulum.xml", 2, 1000,
                                      950.0};

  static std::vector<OptionSpec> TaskOptions() { return {detail::noise_option(0.01)}; }
  static int64_t ObsSize(const ModelInfo& i, const Options&) { return i.nq + i.nv; }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq + i.nv >= 2, "InvertedPendulum-v5 needs a model with nq + nv >= 2");
  }
  static const auto& info_fields() {
    static constexpr Field kFields[] = {
        scalar("reward_survive", &InvertedPendulum::reward_survive_)};
    return kFields;
  }

  explicit InvertedPendulum(const EnvOptions& o)
      : MujocoTask(o, scaled_noise(o, Noise::kUniform)) {}

 protected:
  StepResult step_task(const double* action, double* obs) override {
    do_simulation(action);
    write_obs(obs);
    const int n = m_->nq + m_->nv;
    bool finite = true;
    for (int k = 0; k < n; ++k) finite = finite && std::isfinite(obs[k]);
    StepResult r;
    r.terminated = !finite || std::fabs(obs[1]) > 0.2;
    r.reward = r.terminated ? 0.0 : 1.0;
    reward_survive_ = r.reward;
    return r;
  }

  double reward_survive_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
