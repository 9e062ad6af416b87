// Pusher-v5 (gymnasium/envs/mujoco/pusher_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ----------------------------------------------------------------- Pusher --
class Pusher : public MujocoEnv {
 public:
  static constexpr const char* kId = "Pusher-v5";
  static constexpr const char* kXml = "pusher_v5.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 100;
  static constexpr double kRewardThreshold = 0.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("reward_near_weight", 0.5, "weight of the arm-to-object distance", true),
            opt_float("reward_dist_weight", 1.0, "weight of the object-to-goal distance", true),
            opt_float("reward_control_weight", 0.1, "weight of the control cost", true)};
  }
  static int64_t ObsSize(const ModelInfo&, const Options&) { return 23; }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("reward_dist"), f64_scalar("reward_ctrl"), f64_scalar("reward_near")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 11 && i.nv >= 7,
                 "Pusher-v5 needs a model with 7 arm joints and object and goal slides");
  }

  explicit Pusher(const EnvOptions& o)
      : MujocoEnv(o),
        near_w_(o.f("reward_near_weight")),
        dist_w_(o.f("reward_dist_weight")),
        ctrl_w_(o.f("reward_control_weight")),
        tips_(body_id("tips_arm")),
        object_(body_id("object")),
        goal_(body_id("goal")) {}

 protected:
  enum : size_t { kRewDist = kTaskInfo, kRewCtrl, kRewNear, kEnd };

  void reset_model(Rng& rng) override {
    const int nq = m_->nq, nv = m_->nv;
    std::memcpy(d_->qpos, init_qpos_.data(), sizeof(double) * nq);
    double cx, cy;
    for (;;) {  // the object starts away from the goal at the origin
      cx = rng.uniform(-0.3, 0.0);
      cy = rng.uniform(-0.2, 0.2);
      const double c[2] = {cx, cy};
      if (norm(c, 2) > 0.17) break;
    }
    d_->qpos[nq - 4] = cx;
    d_->qpos[nq - 3] = cy;
    d_->qpos[nq - 2] = 0.0;
    d_->qpos[nq - 1] = 0.0;
    add_uniform(d_->qvel, init_qvel_, nv, -0.005, 0.005, rng);
    for (int k = nv - 4; k < nv; ++k) d_->qvel[k] = 0.0;
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, 7);
    w.copy(d_->qvel, 7);
    w.copy(d_->xpos + 3 * tips_, 3);
    w.copy(d_->xpos + 3 * object_, 3);
    w.copy(d_->xpos + 3 * goal_, 3);
  }
  void write_reset_info(const Row& out) const override { zero_infos(out, kTaskInfo, kEnd); }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    write_obs(out.obs<double>());
    const double* obj = d_->xpos + 3 * object_;
    const double* tip = d_->xpos + 3 * tips_;
    const double* goal = d_->xpos + 3 * goal_;
    const double vec_1[3] = {obj[0] - tip[0], obj[1] - tip[1], obj[2] - tip[2]};
    const double vec_2[3] = {obj[0] - goal[0], obj[1] - goal[1], obj[2] - goal[2]};
    const double reward_near = -norm(vec_1, 3) * near_w_;
    const double reward_dist = -norm(vec_2, 3) * dist_w_;
    const double reward_ctrl = -np_sum_sq(action, m_->nu) * ctrl_w_;
    StepResult r;
    r.reward = reward_dist + reward_ctrl + reward_near;
    *info(out, kRewDist) = reward_dist;
    *info(out, kRewCtrl) = reward_ctrl;
    *info(out, kRewNear) = reward_near;
    return r;
  }

  double near_w_, dist_w_, ctrl_w_;
  int tips_, object_, goal_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
