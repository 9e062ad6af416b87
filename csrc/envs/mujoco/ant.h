// Ant-v5 (gymnasium/envs/mujoco/ant_v5.py); see ../mujoco_tasks.h for
// what every task class provides.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// -------------------------------------------------------------------- Ant --
class Ant : public MujocoEnv {
 public:
  static constexpr const char* kId = "Ant-v5";
  static constexpr const char* kXml = "ant.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 6000.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 0.5, "weight of the control cost", true),
            opt_float("contact_cost_weight", 5e-4, "weight of the contact cost", true),
            opt_float("healthy_reward", 1.0, "reward per step while healthy", true),
            opt_str("main_body", "1",
                    "body whose xy displacement gives the forward reward: a name or an index",
                    /*accepts_number=*/true),
            opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy"),
            opt_float("healthy_z_min", 0.2, "healthy_z_range[0]: lower bound of the torso height",
                      true),
            opt_float("healthy_z_max", 1.0, "healthy_z_range[1]: upper bound of the torso height",
                      true),
            opt_float("contact_force_min", -1.0,
                      "contact_force_range[0]: lower clip of the contact forces", true),
            opt_float("contact_force_max", 1.0,
                      "contact_force_range[1]: upper clip of the contact forces", true),
            detail::noise_option(0.1),
            detail::exclude_option(),
            opt_bool("include_cfrc_ext_in_observation", true,
                     "append the clipped external contact forces to the observation")};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    int64_t n = i.nq + i.nv;
    if (detail::flag(o, "exclude_current_positions_from_observation")) n -= 2;
    if (detail::flag(o, "include_cfrc_ext_in_observation")) n += (i.nbody - 1) * 6;
    return n;
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("x_position"),     f64_scalar("y_position"),
            f64_scalar("distance_from_origin"), f64_scalar("x_velocity"),
            f64_scalar("y_velocity"),     f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl"),    f64_scalar("reward_contact"),
            f64_scalar("reward_survive")};
  }
  static void Validate(const ModelInfo& i, const Options& o) {
    detail::need(i.nq >= 3, "Ant-v5 needs a model with nq >= 3");
    resolve_body(i.body_names, o.raw("main_body"));
  }

  // main_body: Gymnasium accepts a body index or a body name.  A number passed
  // from Python arrives as a numeric value, a string as text; a string of
  // digits is read as an index too.
  static int resolve_body(const std::vector<std::string>& body_names, const OptionValue& v) {
    const int nbody = static_cast<int>(body_names.size());
    int id = -1;
    if (!v.num.empty()) {
      detail::need(v.num[0] == std::floor(v.num[0]) && std::fabs(v.num[0]) < 1e9,
                   "main_body must be a body name or an integer body index");
      id = static_cast<int>(v.num[0]);
    } else {
      const std::string& s = v.str;
      detail::need(!s.empty(), "main_body must be a body name or an integer body index");
      const bool digits = s.find_first_not_of("0123456789") == std::string::npos;
      if (digits && s.size() < 10) {
        id = std::stoi(s);
      } else {
        for (int b = 0; b < nbody; ++b) {
          if (body_names[b] == s) id = b;
        }
        detail::need(id >= 0, "main_body: the model has no body named '" + s + "'");
      }
    }
    detail::need(id >= 0 && id < nbody, "main_body: body index " + std::to_string(id) +
                                             " is out of range [0, " + std::to_string(nbody) + ")");
    return id;
  }
  explicit Ant(const EnvOptions& o)
      : MujocoEnv(o),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        contact_w_(o.f("contact_cost_weight")),
        healthy_reward_(o.f("healthy_reward")),
        main_body_(main_body_index(o)),
        terminate_(o.b("terminate_when_unhealthy")),
        z_min_(o.f("healthy_z_min")),
        z_max_(o.f("healthy_z_max")),
        cf_min_(o.f("contact_force_min")),
        cf_max_(o.f("contact_force_max")),
        noise_(o.f("reset_noise_scale")),
        exclude_(o.b("exclude_current_positions_from_observation")),
        include_cfrc_(o.b("include_cfrc_ext_in_observation")) {
    uses_post_constraint_ = true;  // contact cost and observation read cfrc_ext
  }

 protected:
  enum : size_t {
    kX = kTaskInfo, kY, kDist, kXVel, kYVel, kRewForward, kRewCtrl, kRewContact, kRewSurvive, kEnd
  };

  // main_body from an env's view of the options (a number arrives as a
  // numeric value with an empty string).
  int main_body_index(const EnvOptions& o) const {
    OptionValue v;
    v.str = o.s("main_body");
    if (v.str.empty()) v.num = {o.f("main_body")};
    std::vector<std::string> names;
    for (int b = 0; b < m_->nbody; ++b) {
      const char* name = mj_id2name(m_, mjOBJ_BODY, b);
      names.emplace_back(name ? name : "");
    }
    return resolve_body(names, v);
  }

  bool is_healthy() const {
    // np.isfinite(state_vector()).all() and min_z <= z <= max_z (inclusive).
    for (int k = 0; k < m_->nq; ++k) {
      if (!std::isfinite(d_->qpos[k])) return false;
    }
    for (int k = 0; k < m_->nv; ++k) {
      if (!std::isfinite(d_->qvel[k])) return false;
    }
    const double z = d_->qpos[2];
    return z_min_ <= z && z <= z_max_;
  }

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_normal(d_->qvel, init_qvel_, m_->nv, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    const int skip = exclude_ ? 2 : 0;
    w.copy(d_->qpos + skip, m_->nq - skip);
    w.copy(d_->qvel, m_->nv);
    if (include_cfrc_) w.copy_clipped(d_->cfrc_ext + 6, 6 * (m_->nbody - 1), cf_min_, cf_max_);
  }
  void write_position_info(const Row& out) const {
    *info(out, kX) = d_->qpos[0];
    *info(out, kY) = d_->qpos[1];
    *info(out, kDist) = norm(d_->qpos, 2);
  }
  void write_reset_info(const Row& out) const override {
    zero_infos(out, kTaskInfo, kEnd);
    write_position_info(out);
  }
  StepResult step_task(const double* action, const Row& out) override {
    const double* xpos = d_->xpos + 3 * main_body_;
    const double x_before = xpos[0], y_before = xpos[1];
    do_simulation(action);
    const double x_velocity = (xpos[0] - x_before) / dt_;
    const double y_velocity = (xpos[1] - y_before) / dt_;
    write_obs(out.obs<double>());
    const bool healthy = is_healthy();
    const double forward_reward = x_velocity * forward_w_;
    const double healthy_reward = healthy ? healthy_reward_ : 0.0;
    const double rewards = forward_reward + healthy_reward;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(action, m_->nu);
    const double contact_cost =
        contact_w_ * np_sum_sq(d_->cfrc_ext, 6 * m_->nbody, cf_min_, cf_max_);
    const double costs = ctrl_cost + contact_cost;
    StepResult r;
    r.reward = rewards - costs;
    r.terminated = !healthy && terminate_;
    write_position_info(out);
    *info(out, kXVel) = x_velocity;
    *info(out, kYVel) = y_velocity;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    *info(out, kRewContact) = -contact_cost;
    *info(out, kRewSurvive) = healthy_reward;
    return r;
  }

  double forward_w_, ctrl_w_, contact_w_, healthy_reward_;
  int main_body_;
  bool terminate_;
  double z_min_, z_max_, cf_min_, cf_max_, noise_;
  bool exclude_, include_cfrc_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
