// The Gymnasium v5 MuJoCo tasks, one class each (gymnasium/envs/mujoco/*_v5.py).
//
// Every class mirrors its Python counterpart statement by statement: the same
// reset distribution (on our own Rng), observation layout, health checks,
// reward terms and info entries, computed in the same order so that rounding
// matches.  Each also provides, as statics used by MujocoFamily:
//   kId, kXml, kFrameSkip, kMaxEpisodeSteps, kRewardThreshold,
//   TaskOptions()                         options besides xml_file/frame_skip,
//   ObsSize(info, options)                observation length,
//   Infos(info)                           task infos (after qpos0/qvel0),
//   Validate(info, options)               model/option checks before any env.
#pragma once

#include <string>
#include <vector>

#include "mujoco_env.h"

namespace torchfrag {
namespace mujoco_envs {

namespace detail {

inline bool flag(const Options& o, const char* name) { return o.num(name) != 0.0; }

inline void need(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// Gymnasium's "exclude_current_positions_from_observation" option.
inline OptionSpec exclude_option() {
  return opt_bool("exclude_current_positions_from_observation", true,
                  "leave the x (and y) position of the root out of the observation");
}
inline OptionSpec noise_option(double def) {
  return opt_float("reset_noise_scale", def,
                   "scale of the random perturbation of the initial state", true);
}

}  // namespace detail

// ------------------------------------------------------------ HalfCheetah --
class HalfCheetah : public MujocoEnv {
 public:
  static constexpr const char* kId = "HalfCheetah-v5";
  static constexpr const char* kXml = "half_cheetah.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 4800.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 0.1, "weight of the control cost", true),
            detail::noise_option(0.1), detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - (detail::flag(o, "exclude_current_positions_from_observation") ? 1 : 0);
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("x_position"), f64_scalar("x_velocity"), f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 1, "HalfCheetah-v5 needs a model with nq >= 1");
  }

  explicit HalfCheetah(const EnvOptions& o)
      : MujocoEnv(o),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        noise_(o.f("reset_noise_scale")),
        exclude_(o.b("exclude_current_positions_from_observation")) {}

 protected:
  enum : size_t { kX = kTaskInfo, kXVel, kRewForward, kRewCtrl, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_normal(d_->qvel, init_qvel_, m_->nv, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    const int skip = exclude_ ? 1 : 0;
    w.copy(d_->qpos + skip, m_->nq - skip);
    w.copy(d_->qvel, m_->nv);
  }
  void write_reset_info(const Row& out) const override {
    zero_infos(out, kTaskInfo, kEnd);
    *info(out, kX) = d_->qpos[0];
  }
  StepResult step_task(const double* action, const Row& out) override {
    const double x_before = d_->qpos[0];
    do_simulation(action);
    const double x_after = d_->qpos[0];
    const double x_velocity = (x_after - x_before) / dt_;
    write_obs(out.obs<double>());
    const double forward_reward = forward_w_ * x_velocity;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(action, m_->nu);
    StepResult r;
    r.reward = forward_reward - ctrl_cost;
    *info(out, kX) = x_after;
    *info(out, kXVel) = x_velocity;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    return r;
  }

  double forward_w_, ctrl_w_, noise_;
  bool exclude_;
};

// ----------------------------------------------------------------- Hopper --
// Walker2d-v5 differs only in its model, defaults and health check.
class Hopper : public MujocoEnv {
 public:
  static constexpr const char* kId = "Hopper-v5";
  static constexpr const char* kXml = "hopper.xml";
  static constexpr int kFrameSkip = 4;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 3800.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 1e-3, "weight of the control cost", true),
            opt_float("healthy_reward", 1.0, "reward per step while healthy", true),
            opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy"),
            opt_float("healthy_state_min", -100.0,
                      "healthy_state_range[0]: lower bound of qpos[2:] and qvel", true),
            opt_float("healthy_state_max", 100.0,
                      "healthy_state_range[1]: upper bound of qpos[2:] and qvel", true),
            opt_float("healthy_z_min", 0.7, "healthy_z_range[0]: lower bound of the torso height",
                      true),
            opt_float("healthy_z_max", kInf,
                      "healthy_z_range[1]: upper bound of the torso height", true),
            opt_float("healthy_angle_min", -0.2, "healthy_angle_range[0]: lower torso angle bound",
                      true),
            opt_float("healthy_angle_max", 0.2, "healthy_angle_range[1]: upper torso angle bound",
                      true),
            detail::noise_option(5e-3), detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - (detail::flag(o, "exclude_current_positions_from_observation") ? 1 : 0);
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("x_position"),     f64_scalar("z_distance_from_origin"),
            f64_scalar("x_velocity"),     f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl"),    f64_scalar("reward_survive")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 3, "Hopper-v5/Walker2d-v5 need a model with nq >= 3");
  }

  explicit Hopper(const EnvOptions& o, bool walker = false)
      : MujocoEnv(o),
        walker_(walker),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        healthy_reward_(o.f("healthy_reward")),
        terminate_(o.b("terminate_when_unhealthy")),
        state_min_(walker ? 0.0 : o.f("healthy_state_min")),
        state_max_(walker ? 0.0 : o.f("healthy_state_max")),
        z_min_(o.f("healthy_z_min")),
        z_max_(o.f("healthy_z_max")),
        angle_min_(o.f("healthy_angle_min")),
        angle_max_(o.f("healthy_angle_max")),
        noise_(o.f("reset_noise_scale")),
        exclude_(o.b("exclude_current_positions_from_observation")) {}

 protected:
  enum : size_t { kX = kTaskInfo, kZDist, kXVel, kRewForward, kRewCtrl, kRewSurvive, kEnd };

  bool is_healthy() const {
    const double z = d_->qpos[1], angle = d_->qpos[2];
    const bool healthy_z = z_min_ < z && z < z_max_;
    const bool healthy_angle = angle_min_ < angle && angle < angle_max_;
    if (walker_) return healthy_z && healthy_angle;
    // state_vector()[2:]: qpos[2:] then all of qvel, strictly inside the range.
    bool healthy_state = true;
    for (int k = 2; k < m_->nq; ++k) {
      const double s = d_->qpos[k];
      healthy_state = healthy_state && state_min_ < s && s < state_max_;
    }
    for (int k = 0; k < m_->nv; ++k) {
      const double s = d_->qvel[k];
      healthy_state = healthy_state && state_min_ < s && s < state_max_;
    }
    return healthy_state && healthy_z && healthy_angle;
  }

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    const int skip = exclude_ ? 1 : 0;
    w.copy(d_->qpos + skip, m_->nq - skip);
    w.copy_clipped(d_->qvel, m_->nv, -10.0, 10.0);
  }
  void write_reset_info(const Row& out) const override {
    zero_infos(out, kTaskInfo, kEnd);
    *info(out, kX) = d_->qpos[0];
    *info(out, kZDist) = d_->qpos[1] - init_qpos_[1];
  }
  StepResult step_task(const double* action, const Row& out) override {
    const double x_before = d_->qpos[0];
    do_simulation(action);
    const double x_after = d_->qpos[0];
    const double x_velocity = (x_after - x_before) / dt_;
    write_obs(out.obs<double>());
    const bool healthy = is_healthy();
    const double forward_reward = forward_w_ * x_velocity;
    const double healthy_reward = healthy ? healthy_reward_ : 0.0;
    const double rewards = forward_reward + healthy_reward;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(action, m_->nu);
    StepResult r;
    r.reward = rewards - ctrl_cost;
    r.terminated = !healthy && terminate_;
    *info(out, kX) = x_after;
    *info(out, kZDist) = d_->qpos[1] - init_qpos_[1];
    *info(out, kXVel) = x_velocity;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    *info(out, kRewSurvive) = healthy_reward;
    return r;
  }

  bool walker_;
  double forward_w_, ctrl_w_, healthy_reward_;
  bool terminate_;
  double state_min_, state_max_, z_min_, z_max_, angle_min_, angle_max_, noise_;
  bool exclude_;
};

// --------------------------------------------------------------- Walker2d --
class Walker2d : public Hopper {
 public:
  static constexpr const char* kId = "Walker2d-v5";
  static constexpr const char* kXml = "walker2d_v5.xml";
  static constexpr int kFrameSkip = 4;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = kInf;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 1e-3, "weight of the control cost", true),
            opt_float("healthy_reward", 1.0, "reward per step while healthy", true),
            opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy"),
            opt_float("healthy_z_min", 0.8, "healthy_z_range[0]: lower bound of the torso height",
                      true),
            opt_float("healthy_z_max", 2.0, "healthy_z_range[1]: upper bound of the torso height",
                      true),
            opt_float("healthy_angle_min", -1.0, "healthy_angle_range[0]: lower torso angle bound",
                      true),
            opt_float("healthy_angle_max", 1.0, "healthy_angle_range[1]: upper torso angle bound",
                      true),
            detail::noise_option(5e-3), detail::exclude_option()};
  }

  explicit Walker2d(const EnvOptions& o) : Hopper(o, true) {}
};

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

// ------------------------------------------------- InvertedDoublePendulum --
class InvertedDoublePendulum : public MujocoEnv {
 public:
  static constexpr const char* kId = "InvertedDoublePendulum-v5";
  static constexpr const char* kXml = "inverted_double_pendulum.xml";
  static constexpr int kFrameSkip = 5;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 9100.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("healthy_reward", 10.0, "reward per step while the tip is up", true),
            detail::noise_option(0.1)};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options&) {
    return 1 + 2 * static_cast<int64_t>(i.nq - 1) + i.nv + 1;
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("reward_survive"), f64_scalar("distance_penalty"),
            f64_scalar("velocity_penalty")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 1 && i.nv >= 3 && i.nsite >= 1,
                 "InvertedDoublePendulum-v5 needs a model with nv >= 3 and a site");
  }

  explicit InvertedDoublePendulum(const EnvOptions& o)
      : MujocoEnv(o), healthy_reward_(o.f("healthy_reward")), noise_(o.f("reset_noise_scale")) {}

 protected:
  enum : size_t { kRewSurvive = kTaskInfo, kDistPenalty, kVelPenalty, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_normal(d_->qvel, init_qvel_, m_->nv, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(d_->qpos[0]);
    for (int k = 1; k < m_->nq; ++k) w.put(std::sin(d_->qpos[k]));
    for (int k = 1; k < m_->nq; ++k) w.put(std::cos(d_->qpos[k]));
    w.copy_clipped(d_->qvel, m_->nv, -10.0, 10.0);
    w.put(clip(d_->qfrc_constraint[0], -10.0, 10.0));
  }
  void write_reset_info(const Row& out) const override { zero_infos(out, kTaskInfo, kEnd); }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    const double x = d_->site_xpos[0], y = d_->site_xpos[2];
    write_obs(out.obs<double>());
    StepResult r;
    r.terminated = y <= 1;
    const double v1 = d_->qvel[1], v2 = d_->qvel[2];
    const double dist_penalty = 0.01 * (x * x) + (y - 2) * (y - 2);
    const double vel_penalty = 0.001 * (v1 * v1) + 0.005 * (v2 * v2);
    const double alive_bonus = healthy_reward_ * (r.terminated ? 0.0 : 1.0);
    r.reward = alive_bonus - dist_penalty - vel_penalty;
    *info(out, kRewSurvive) = alive_bonus;
    *info(out, kDistPenalty) = -dist_penalty;
    *info(out, kVelPenalty) = -vel_penalty;
    return r;
  }

  double healthy_reward_, noise_;
};

// ------------------------------------------------------- InvertedPendulum --
class InvertedPendulum : public MujocoEnv {
 public:
  static constexpr const char* kId = "InvertedPendulum-v5";
  static constexpr const char* kXml = "inverted_pendulum.xml";
  static constexpr int kFrameSkip = 2;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 950.0;

  static std::vector<OptionSpec> TaskOptions() { return {detail::noise_option(0.01)}; }
  static int64_t ObsSize(const ModelInfo& i, const Options&) { return i.nq + i.nv; }
  static std::vector<ArraySpec> Infos(const ModelInfo&) { return {f64_scalar("reward_survive")}; }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq + i.nv >= 2, "InvertedPendulum-v5 needs a model with nq + nv >= 2");
  }

  explicit InvertedPendulum(const EnvOptions& o)
      : MujocoEnv(o), noise_(o.f("reset_noise_scale")) {}

 protected:
  enum : size_t { kRewSurvive = kTaskInfo, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, m_->nq);
    w.copy(d_->qvel, m_->nv);
  }
  void write_reset_info(const Row& out) const override { zero_infos(out, kTaskInfo, kEnd); }
  StepResult step_task(const double* action, const Row& out) override {
    do_simulation(action);
    double* obs = out.obs<double>();
    write_obs(obs);
    const int n = m_->nq + m_->nv;
    bool finite = true;
    for (int k = 0; k < n; ++k) finite = finite && std::isfinite(obs[k]);
    StepResult r;
    r.terminated = !finite || std::fabs(obs[1]) > 0.2;
    r.reward = r.terminated ? 0.0 : 1.0;
    *info(out, kRewSurvive) = r.reward;
    return r;
  }

  double noise_;
};

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

// ---------------------------------------------------------------- Swimmer --
class Swimmer : public MujocoEnv {
 public:
  static constexpr const char* kId = "Swimmer-v5";
  static constexpr const char* kXml = "swimmer.xml";
  static constexpr int kFrameSkip = 4;
  static constexpr int64_t kMaxEpisodeSteps = 1000;
  static constexpr double kRewardThreshold = 360.0;

  static std::vector<OptionSpec> TaskOptions() {
    return {opt_float("forward_reward_weight", 1.0, "weight of the forward reward", true),
            opt_float("ctrl_cost_weight", 1e-4, "weight of the control cost", true),
            detail::noise_option(0.1), detail::exclude_option()};
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    return i.nq + i.nv - (detail::flag(o, "exclude_current_positions_from_observation") ? 2 : 0);
  }
  static std::vector<ArraySpec> Infos(const ModelInfo&) {
    return {f64_scalar("x_position"), f64_scalar("y_position"), f64_scalar("distance_from_origin"),
            f64_scalar("x_velocity"), f64_scalar("y_velocity"), f64_scalar("reward_forward"),
            f64_scalar("reward_ctrl")};
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 2, "Swimmer-v5 needs a model with nq >= 2");
  }

  explicit Swimmer(const EnvOptions& o)
      : MujocoEnv(o),
        forward_w_(o.f("forward_reward_weight")),
        ctrl_w_(o.f("ctrl_cost_weight")),
        noise_(o.f("reset_noise_scale")),
        exclude_(o.b("exclude_current_positions_from_observation")) {}

 protected:
  enum : size_t { kX = kTaskInfo, kY, kDist, kXVel, kYVel, kRewForward, kRewCtrl, kEnd };

  void reset_model(Rng& rng) override {
    add_uniform(d_->qpos, init_qpos_, m_->nq, -noise_, noise_, rng);
    add_uniform(d_->qvel, init_qvel_, m_->nv, -noise_, noise_, rng);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    const int skip = exclude_ ? 2 : 0;
    w.copy(d_->qpos + skip, m_->nq - skip);
    w.copy(d_->qvel, m_->nv);
  }
  void write_reset_info(const Row& out) const override {
    zero_infos(out, kTaskInfo, kEnd);
    *info(out, kX) = d_->qpos[0];
    *info(out, kY) = d_->qpos[1];
    *info(out, kDist) = norm(d_->qpos, 2);
  }
  StepResult step_task(const double* action, const Row& out) override {
    const double x_before = d_->qpos[0], y_before = d_->qpos[1];
    do_simulation(action);
    const double x_after = d_->qpos[0], y_after = d_->qpos[1];
    const double x_velocity = (x_after - x_before) / dt_;
    const double y_velocity = (y_after - y_before) / dt_;
    write_obs(out.obs<double>());
    const double forward_reward = forward_w_ * x_velocity;
    const double ctrl_cost = ctrl_w_ * np_sum_sq(action, m_->nu);
    StepResult r;
    r.reward = forward_reward - ctrl_cost;
    *info(out, kX) = x_after;
    *info(out, kY) = y_after;
    const double xy[2] = {x_after, y_after};
    *info(out, kDist) = norm(xy, 2);
    *info(out, kXVel) = x_velocity;
    *info(out, kYVel) = y_velocity;
    *info(out, kRewForward) = forward_reward;
    *info(out, kRewCtrl) = -ctrl_cost;
    return r;
  }

  double forward_w_, ctrl_w_, noise_;
  bool exclude_;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
