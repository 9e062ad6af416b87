// Humanoid-v5 (gymnasium/envs/mujoco/humanoid_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// --------------------------------------------------------------- Humanoid --
// Observation shared by Humanoid-v5 and HumanoidStandup-v5.
struct HumanoidObs {
  bool exclude, cinert, cvel, qfrc_actuator, cfrc_ext;

  explicit HumanoidObs(const EnvOptions& o)
      : exclude(o.b("exclude_current_positions_from_observation")),
        cinert(o.b("include_cinert_in_observation")),
        cvel(o.b("include_cvel_in_observation")),
        qfrc_actuator(o.b("include_qfrc_actuator_in_observation")),
        cfrc_ext(o.b("include_cfrc_ext_in_observation")) {}

  static std::vector<OptionSpec> Options() {
    return {detail::exclude_option(),
            opt_bool("include_cinert_in_observation", true, "append cinert[1:] to the observation"),
            opt_bool("include_cvel_in_observation", true, "append cvel[1:] to the observation"),
            opt_bool("include_qfrc_actuator_in_observation", true,
                     "append qfrc_actuator[6:] to the observation"),
            opt_bool("include_cfrc_ext_in_observation", true,
                     "append cfrc_ext[1:] to the observation")};
  }
  static int64_t Size(const ModelInfo& i, const torchfrag::Options& o) {
    int64_t n = i.nq + i.nv;
    if (detail::flag(o, "exclude_current_positions_from_observation")) n -= 2;
    if (detail::flag(o, "include_cinert_in_observation")) n += (i.nbody - 1) * 10;
    if (detail::flag(o, "include_cvel_in_observation")) n += (i.nbody - 1) * 6;
    if (detail::flag(o, "include_qfrc_actuator_in_observation")) n += i.nv - 6;
    if (detail::flag(o, "include_cfrc_ext_in_observation")) n += (i.nbody - 1) * 6;
    return n;
  }
  void write(const mjModel* m, const mjData* d, double* obs) const {
    ObsWriter w{obs};
    const int skip = exclude ? 2 : 0;
    w.copy(d->qpos + skip, m->nq - skip);
    w.copy(d->qvel, m->nv);
    if (cinert) w.copy(d->cinert + 10, 10 * (m->nbody - 1));
    if (cvel) w.copy(d->cvel + 6, 6 * (m->nbody - 1));
    if (qfrc_actuator) w.copy(d->qfrc_actuator + 6, m->nv - 6);
    if (cfrc_ext) w.copy(d->cfrc_ext + 6, 6 * (m->nbody - 1));
  }
};

class Humanoid : public MujocoEnv {
 public:
  static constexpr const char* kId = "Humanoid-v5";
  static constexpr const char* kXml = "humanoid.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = kInf;

  static std::vector<OptionSpec> TaskOptions() {
    std::vector<OptionSpec> v = {
        opt_float("forward_reward_weight", 1.25, "weight of the forward reward", true),
        opt_float("ctrl_cost_weight", 0.1, "weight of the control cost", true),
        opt_float("contact_cost_weight", 5e-7, "weight of the contact cost", true),
        opt_float("contact_cost_min", -kInf,
                  "contact_cost_range[0]: lower clip of the contact cost", true),
        opt_float("contact_cost_max", 10.0, "contact_cost_range[1]: upper clip of the contact cost",
                  true),
        opt_float("healthy_reward", 5.0, "reward per step while healthy", true),
        opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy"),
        opt_float("healthy_z_min", 1.0, "healthy_z_range[0]: lower bound of the torso height",
                  true),
        opt_float("healthy_z_max", 2.0, "healthy_z_range[1]: upper bound of the torso height",
                  true),
        detail::noise_option(1e-2)};
    for (auto& x : HumanoidObs::Options()) v.push_back(x);
    return v;
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) { return HumanoidObs::Size(i, o); }
  static std::vector<ArraySpec> Infos(const ModelInfo& i) {
    return {f64_scalar("x_position"),
            f64_scalar("y_position"),
            f64_array("tendon_length", {i.ntendon}),
            f64_array("tendon_velocity", {i.ntendon}),
            f64_scalar("distance_from_origin"),
            f64_scalar("x_velocity"),
            f64_scalar("y_velocity"),
            f64_scalar("reward_survive"),
            f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl"),
            f64_scalar("reward_contact")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 3 && i.nv >= 6,
                 "Humanoid-v5 needs a model with a free root joint (nq >= 3, nv >= 6)");
  }

  explicit Humanoid(const EnvOptions& o)
      : MujocoEnv(o),
        obs_(o),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        contact_w_(o.f("contact_cost_weight")),
        contact_min_(o.f("contact_cost_min")),
        contact_max_(o.f("contact_cost_max")),
        healthy_reward_(o.f("healthy_reward")),
        terminate_(o.b("terminate_when_unhealthy")),
        z_min_(o.f("healthy_z_min")),
        z_max_(o.f("healthy_z_max")),
        noise_(o.f("reset_noise_scale")) {
    uses_post_constraint_ = true;  // contact cost and observation read cfrc_ext
    double total = 0.0;
    for (int b = 0; b < m_->nbody; ++b) total += m_->body_mass[b];
    total_mass_ = total;
  }

 protected:
  enum : size_t {
    kX = kTaskInfo, kY, kTenLen, kTenVel, kDist, kXVel, kYVel, kRewSurvive, kRewForward,
    kRewCtrl, kRewContact, kEnd
  };

  // mass_center(): sum(body_mass * xipos) / sum(body_mass), x and y only.
  void mass_center(double* xy) const {
    double sx = 0.0, sy = 0.0;
    for (int b = 0; b < m_->nbody; ++b) {
      sx += m_->body_mass[b] * d_->xipos[3 * b];
      sy += m_->body_mass[b] * d_->xipos[3 * b + 1];
    }
    xy[0] = sx / total_mass_;
    xy[1] = sy / total_mass_;
  }
  void write_common_info(const Row& out) const {
    *info(out, kX) = d_->qpos[0];
    *info(out, kY) = d_->qpos[1];
    std::memcpy(info(out, kTenLen), d_->ten_length, sizeof(double) * m_->ntendon);
    std::memcpy(info(out, kTenVel), d_->ten_velocity, sizeof(double) * m_->ntendon);
    *info(out, kDist) = norm(d_->qpos, 2);
  }

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override { obs_.write(m_, d_, obs); }
  void write_reset_info(const Row& out) const override {
    for (size_t k = kTaskInfo; k < kEnd; ++k) {
      if (k != kTenLen && k != kTenVel) *info(out, k) = 0.0;
    }
    write_common_info(out);
  }
  StepResult step_task(const double* action, const Row& out) override {
    double before[2], after[2];
    mass_center(before);
    do_simulation(action);
    mass_center(after);
    const double x_velocity = (after[0] - before[0]) / dt_;
    const double y_velocity = (after[1] - before[1]) / dt_;
    write_obs(out.obs<double>());
    const double z = d_->qpos[2];
    const bool healthy = z_min_ < z && z < z_max_;
    const double forward_reward = forward_w_ * x_velocity;
    const double healthy_reward = healthy ? healthy_reward_ : 0.0;
    const double rewards = forward_reward + healthy_reward;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(d_->ctrl, m_->nu);
    const double contact_cost =
        clip(contact_w_ * np_sum_sq(d_->cfrc_ext, 6 * m_->nbody), contact_min_, contact_max_);
    const double costs = ctrl_cost + contact_cost;
    StepResult r;
    r.reward = rewards - costs;
    r.terminated = !healthy && terminate_;
    write_common_info(out);
    *info(out, kXVel) = x_velocity;
    *info(out, kYVel) = y_velocity;
    *info(out, kRewSurvive) = healthy_reward;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    *info(out, kRewContact) = -contact_cost;
    return r;
  }

  HumanoidObs obs_;
  double forward_w_, ctrl_w_, contact_w_, contact_min_, contact_max_, healthy_reward_;
  bool terminate_;
  double z_min_, z_max_, noise_;
  double total_mass_ = 1.0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
