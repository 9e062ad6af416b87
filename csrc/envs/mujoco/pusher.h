// Pusher-v5 (gymnasium/envs/mujoco/pusher_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ----------------------------------------------------------------- Pusher --
class Pusher : public MujocoTask<Pusher> {
 public:
  static constexpr TaskTraits kTraits{"Pusher-v5", "pusher_v5.xml", 5, 100, 0.0};

  static std::vector<OptionSpec> TaskOptions() {
    return {detail::weight_option("reward_near", 0.5, "arm-to-object distance"),
            detail::weight_option("reward_dist", 1.0, "object-to-goal distance"),
            detail::weight_option("reward_control", 0.1, "control cost")};
  }
  static int64_t ObsSize(const ModelInfo&, const Options&) { return 23; }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 11 && i.nv >= 7,
                 "Pusher-v5 needs a model with 7 arm joints and object and goal slides");
  }
  static const auto& info_fields() {
    static constexpr Field kFields[] = {scalar("reward_dist", &Pusher::reward_dist_),
                                        scalar("reward_ctrl", &Pusher::reward_ctrl_),
                                        scalar("reward_near", &Pusher::reward_near_)};
    return kFields;
  }

  // The arm starts at rest in its initial pose (no qpos noise); the object
  // and goal slides (the last 4 joints) start still.
  explicit Pusher(const EnvOptions& o)
      : MujocoTask(o, ResetNoise{Noise::kNone, 0.0, Noise::kUniform, 0.005, 4}),
        near_w_(o.f("reward_near_weight")),
        dist_w_(o.f("reward_dist_weight")),
        ctrl_w_(o.f("reward_control_weight")),
        tips_(body_id("tips_arm")),
        object_(body_id("object")),
        goal_(body_id("goal")) {}

 protected:
  // The object starts away from the goal, which sits at the origin.
  void place_targets(Rng& rng) override {
    const int nq = m_->nq;
    detail::draw_target(rng, -0.3, 0.0, -0.2, 0.2, [](double r) { return r > 0.17; },
                        d_->qpos + nq - 4);
    d_->qpos[nq - 2] = 0.0;
    d_->qpos[nq - 1] = 0.0;
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, 7);
    w.copy(d_->qvel, 7);
    w.copy(d_->xpos + 3 * tips_, 3);
    w.copy(d_->xpos + 3 * object_, 3);
    w.copy(d_->xpos + 3 * goal_, 3);
  }
  StepResult step_task(const double* action, double* obs) override {
    do_simulation(action);
    write_obs(obs);
    const double* obj = d_->xpos + 3 * object_;
    const double* tip = d_->xpos + 3 * tips_;
    const double* goal = d_->xpos + 3 * goal_;
    const double vec_1[3] = {obj[0] - tip[0], obj[1] - tip[1], obj[2] - tip[2]};
    const double vec_2[3] = {obj[0] - goal[0], obj[1] - goal[1], obj[2] - goal[2]};
    reward_near_ = -norm(vec_1, 3) * near_w_;
    reward_dist_ = -norm(vec_2, 3) * dist_w_;
    reward_ctrl_ = -np_sum_sq(action, m_->nu) * ctrl_w_;
    StepResult r;
    r.reward = reward_dist_ + reward_ctrl_ + reward_near_;
    return r;
  }

  double near_w_, dist_w_, ctrl_w_;
  int tips_, object_, goal_;
  double reward_dist_ = 0, reward_ctrl_ = 0, reward_near_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
