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
class Ant : public MujocoTask<Ant>, public Locomotion {
 public:
  static constexpr TaskTraits kTraits{"Ant-v5", "ant.xml", 5, 1000, 6000.0};

  static std::vector<OptionSpec> TaskOptions() {
    std::vector<OptionSpec> v = {
        detail::weight_option("forward_reward", 1.0, "forward reward"),
        detail::weight_option("ctrl_cost", 0.5, "control cost"),
        detail::weight_option("contact_cost", 5e-4, "contact cost"),
        detail::healthy_reward_option(1.0),
        opt_str("main_body", "1",
                "body whose xy displacement gives the forward reward: a name or an index",
                /*accepts_number=*/true),
        detail::terminate_option()};
    detail::add_range(v, "healthy_z", 0.2, 1.0, "bound of the torso height");
    detail::add_range(v, "contact_force", -1.0, 1.0, "clip of the contact forces");
    v.push_back(detail::noise_option(0.1));
    v.push_back(detail::exclude_option());
    v.push_back(opt_bool("include_cfrc_ext_in_observation", true,
                         "append the clipped external contact forces to the observation"));
    return v;
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    int64_t n = i.nq + i.nv - detail::excluded(o, 2);
    if (detail::flag(o, "include_cfrc_ext_in_observation")) n += (i.nbody - 1) * 6;
    return n;
  }
  static const auto& info_fields() {
    using L = LocomotionInfo<Ant>;
    static constexpr Field kFields[] = {
        L::x_position, L::y_position, L::distance_from_origin, L::x_velocity, L::y_velocity,
        L::reward_forward, L::reward_ctrl, scalar("reward_contact", &Ant::reward_contact_),
        L::reward_survive};
    return kFields;
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
      : MujocoTask(o, scaled_noise(o, Noise::kNormal)),
        Locomotion(o),
        contact_w_(o.f("contact_cost_weight")),
        health_(o),
        main_body_(main_body_index(o)),
        cf_min_(o.f("contact_force_min")),
        cf_max_(o.f("contact_force_max")),
        include_cfrc_(o.b("include_cfrc_ext_in_observation")) {
    obs_skip_ = detail::excluded(o, 2);
    uses_post_constraint_ = true;  // contact cost and observation read cfrc_ext
  }

 protected:
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
    return health_.z_min <= z && z <= health_.z_max;
  }

  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    write_state(w);
    if (include_cfrc_) w.copy_clipped(d_->cfrc_ext + 6, 6 * (m_->nbody - 1), cf_min_, cf_max_);
  }
  void set_reset_info() override { set_planar_position(d_->qpos); }
  StepResult step_task(const double* action, double* obs) override {
    const double* xpos = d_->xpos + 3 * main_body_;
    const double x_before = xpos[0], y_before = xpos[1];
    do_simulation(action);
    y_velocity = velocity(y_before, xpos[1]);
    const double ctrl_cost = forward_and_ctrl(velocity(x_before, xpos[0]), action, m_->nu);
    write_obs(obs);
    const double contact_cost =
        contact_w_ * np_sum_sq(d_->cfrc_ext, 6 * m_->nbody, cf_min_, cf_max_);
    reward_contact_ = -contact_cost;
    set_planar_position(d_->qpos);
    return healthy_step(is_healthy(), health_, ctrl_cost + contact_cost);
  }

  double contact_w_;
  Health health_;
  int main_body_;
  double cf_min_, cf_max_;
  bool include_cfrc_;
  double reward_contact_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
