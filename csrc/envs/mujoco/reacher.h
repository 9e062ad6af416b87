// Reacher-v5 (gymnasium/envs/mujoco/reacher_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ---------------------------------------------------------------- Reacher --
class Reacher : public MujocoEnv {
 public:
  static constexpr const char* kId = "Reacher-v5";
  static constexpr const char* kXml = "reacher.xml";
  static constexpr int kFrameSkip = 2;
  static constexpr int64_t kMaxEpisodeSteps = 50;
  static constexpr double kRewardThreshold = -3.75;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("reward_dist_weight", 1.0, "weight of the fingertip-to-target distance",
                      true),
            opt_float("reward_control_weight", 1.0, "weight of the control cost", true)};
  }
  static int64_t ObsSize(const ModelInfo&, const Options&) { return 10; }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("reward_dist"), f64_scalar("reward_ctrl")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq == 4 && i.nv >= 2,
                 "Reacher-v5 needs a model with 2 arm joints and a 2-D target");
  }

  explicit Reacher(const EnvOptions& o)
      : MujocoEnv(o),
        dist_w_(o.f("reward_dist_weight")),
        ctrl_w_(o.f("reward_control_weight")),
        fingertip_(body_id("fingertip")),
        target_(body_id("target")) {}

 protected:
  enum : size_t { kRewDist = kTaskInfo, kRewCtrl, kEnd };

  void reset_model(Rng& rng) override {
    const int nq = m_->nq, nv = m_->nv;
    add_uniform(d_->qpos, init_qpos_, nq, -0.1, 0.1, rng);
    double goal[2];
    for (;;) {  // a target inside the disc of radius 0.2
      goal[0] = rng.uniform(-0.2, 0.2);
      goal[1] = rng.uniform(-0.2, 0.2);
      if (norm(goal, 2) < 0.2) break;
    }
    d_->qpos[nq - 2] = goal[0];
    d_->qpos[nq - 1] = goal[1];
    add_uniform(d_->qvel, init_qvel_, nv, -0.005, 0.005, rng);
    d_->qvel[nv - 2] = 0.0;
    d_->qvel[nv - 1] = 0.0;
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(std::cos(d_->qpos[0]));
    w.put(std::cos(d_->qpos[1]));
    w.put(std::sin(d_->qpos[0]));
    w.put(std::sin(d_->qpos[1]));
    w.copy(d_->qpos + 2, m_->nq - 2);
    w.copy(d_->qvel, 2);
    const double* f = d_->xpos + 3 * fingertip_;
    const double* t = d_->xpos + 3 * target_;
    w.put(f[0] - t[0]);
    w.put(f[1] - t[1]);
  }
  void write_reset_info(const Row& out) const override { zero_infos(out, kTaskInfo, kEnd); }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    write_obs(out.obs<double>());
    const double* f = d_->xpos + 3 * fingertip_;
    const double* t = d_->xpos + 3 * target_;
    const double vec[3] = {f[0] - t[0], f[1] - t[1], f[2] - t[2]};
    const double reward_dist = -norm(vec, 3) * dist_w_;
    const double reward_ctrl = -np_sum_sq(action, m_->nu) * ctrl_w_;
    StepResult r;
    r.reward = reward_dist + reward_ctrl;
    *info(out, kRewDist) = reward_dist;
    *info(out, kRewCtrl) = reward_ctrl;
    return r;
  }

  double dist_w_, ctrl_w_;
  int fingertip_, target_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
