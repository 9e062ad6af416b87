// HumanoidStandup-v5 (gymnasium/envs/mujoco/humanoid_standup_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"
#include "humanoid.h"

namespace torchfrag {
namespace mujoco_envs {

// -------------------------------------------------------- HumanoidStandup --
class HumanoidStandup : public MujocoEnv {
 public:
  static constexpr const char* kId = "HumanoidStandup-v5";
  static constexpr const char* kXml = "humanoidstandup.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = kInf;

  static std::vector<OptionSpec> TaskOptions() {
    std::vector<OptionSpec> v = {
        opt_float("uph_cost_weight", 1.0,
                  "weight of the upward reward; accepted but unused, as in Gymnasium 1.x", true),
        opt_float("ctrl_cost_weight", 0.1, "weight of the control cost", true),
        opt_float("impact_cost_weight", 5e-7, "weight of the impact (contact) cost", true),
        opt_float("impact_cost_min", -kInf, "impact_cost_range[0]: lower clip of the impact cost",
                  true),
        opt_float("impact_cost_max", 10.0, "impact_cost_range[1]: upper clip of the impact cost",
                  true),
        detail::noise_option(1e-2)};
    for (auto& x : HumanoidObs::Options()) v.push_back(x);
    return v;
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) { return HumanoidObs::Size(i, o); }
  static std::vector<ArraySpec> Infos(const ModelInfo& i) {
    return {f64_scalar("x_position"),
            f64_scalar("y_position"),
            f64_scalar("z_distance_from_origin"),
            f64_array("tendon_length", {i.ntendon}),
            f64_array("tendon_velocity", {i.ntendon}),
            f64_scalar("reward_linup"),
            f64_scalar("reward_quadctrl"),
            f64_scalar("reward_impact")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 3 && i.nv >= 6,
                 "HumanoidStandup-v5 needs a model with a free root joint (nq >= 3, nv >= 6)");
  }

  explicit HumanoidStandup(const EnvOptions& o)
      : MujocoEnv(o),
        obs_(o),
        ctrl_w_(o.f("ctrl_cost_weight")),
        impact_w_(o.f("impact_cost_weight")),
        impact_min_(o.f("impact_cost_min")),
        impact_max_(o.f("impact_cost_max")),
        noise_(o.f("reset_noise_scale")) {
    uses_post_constraint_ = true;  // impact cost and observation read cfrc_ext
  }

 protected:
  enum : size_t { kX = kTaskInfo, kY, kZDist, kTenLen, kTenVel, kRewLinup, kRewQuadctrl,
                  kRewImpact, kEnd };

  void write_common_info(const Row& out) const {
    *info(out, kX) = d_->qpos[0];
    *info(out, kY) = d_->qpos[1];
    *info(out, kZDist) = d_->qpos[2] - init_qpos_[2];
    std::memcpy(info(out, kTenLen), d_->ten_length, sizeof(double) * m_->ntendon);
    std::memcpy(info(out, kTenVel), d_->ten_velocity, sizeof(double) * m_->ntendon);
  }
  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override { obs_.write(m_, d_, obs); }
  void write_reset_info(const Row& out) const override {
    *info(out, kRewLinup) = 0.0;
    *info(out, kRewQuadctrl) = 0.0;
    *info(out, kRewImpact) = 0.0;
    write_common_info(out);
  }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    const double pos_after = d_->qpos[2];
    // Gymnasium 1.x divides by the timestep and never applies uph_cost_weight.
    const double uph_cost = (pos_after - 0) / m_->opt.timestep;
    const double quad_ctrl_cost = ctrl_w_ * np_sum_sq(d_->ctrl, m_->nu);
    const double quad_impact_cost =
        clip(impact_w_ * np_sum_sq(d_->cfrc_ext, 6 * m_->nbody), impact_min_, impact_max_);
    StepResult r;
    r.reward = uph_cost - quad_ctrl_cost - quad_impact_cost + 1;
    write_common_info(out);
    *info(out, kRewLinup) = uph_cost;
    *info(out, kRewQuadctrl) = -quad_ctrl_cost;
    *info(out, kRewImpact) = -quad_impact_cost;
    write_obs(out.obs<double>());
    return r;
  }

  HumanoidObs obs_;
  double ctrl_w_, impact_w_, impact_min_, impact_max_, noise_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
