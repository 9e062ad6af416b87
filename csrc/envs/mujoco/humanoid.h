// Humanoid-v5 (gymnasium/envs/mujoco/humanoid_v5.py); see ../mujoco_tasks.h for
// what every task class provides.  HumanoidTask is shared with
// HumanoidStandup-v5 (humanoid_standup.h).
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace torchfrag {
namespace mujoco_envs {

// ---------------------------------------------------------- HumanoidTask --
// What Humanoid-v5 and HumanoidStandup-v5 share: the model checks, the
// observation and the clipped contact (impact) cost.
template <typename Task>
class HumanoidTask : public MujocoTask<Task> {
 public:
  // The observation options, after the task's own.
  static void AddObsOptions(std::vector<OptionSpec>& v) {
    v.push_back(detail::exclude_option());
    v.push_back(opt_bool("include_cinert_in_observation", true,
                         "append cinert[1:] to the observation"));
    v.push_back(
        opt_bool("include_cvel_in_observation", true, "append cvel[1:] to the observation"));
    v.push_back(opt_bool("include_qfrc_actuator_in_observation", true,
                         "append qfrc_actuator[6:] to the observation"));
    v.push_back(opt_bool("include_cfrc_ext_in_observation", true,
                         "append cfrc_ext[1:] to the observation"));
  }
  static int64_t ObsSize(const ModelInfo& i, const Options& o) {
    int64_t n = i.nq + i.nv - detail::excluded(o, 2);
    if (detail::flag(o, "include_cinert_in_observation")) n += (i.nbody - 1) * 10;
    if (detail::flag(o, "include_cvel_in_observation")) n += (i.nbody - 1) * 6;
    if (detail::flag(o, "include_qfrc_actuator_in_observation")) n += i.nv - 6;
    if (detail::flag(o, "include_cfrc_ext_in_observation")) n += (i.nbody - 1) * 6;
    return n;
  }
  static void Validate(const ModelInfo& i, const Options&) {
    detail::need(i.nq >= 3 && i.nv >= 6, std::string(Task::kTraits.id) +
                                             " needs a model with a free root joint (nq >= 3, "
                                             "nv >= 6)");
  }

  explicit HumanoidTask(const EnvOptions& o)
      : MujocoTask<Task>(o, scaled_noise(o, Noise::kUniform)),
        cinert_(o.b("include_cinert_in_observation")),
        cvel_(o.b("include_cvel_in_observation")),
        qfrc_actuator_(o.b("include_qfrc_actuator_in_observation")),
        cfrc_ext_(o.b("include_cfrc_ext_in_observation")) {
    this->obs_skip_ = detail::excluded(o, 2);
    this->uses_post_constraint_ = true;  // the contact cost and observation read cfrc_ext
  }

 protected:
  void write_obs(double* obs) const override {
    const mjModel* m = this->m_;
    const mjData* d = this->d_;
    ObsWriter w{obs};
    this->write_state(w);
    if (cinert_) w.copy(d->cinert + 10, 10 * (m->nbody - 1));
    if (cvel_) w.copy(d->cvel + 6, 6 * (m->nbody - 1));
    if (qfrc_actuator_) w.copy(d->qfrc_actuator + 6, m->nv - 6);
    if (cfrc_ext_) w.copy(d->cfrc_ext + 6, 6 * (m->nbody - 1));
  }
  // The tendon infos both tasks report.
  static constexpr InfoField<Task> tendon_length() {
    return MujocoTask<Task>::per_tendon("tendon_length", &mjData::ten_length);
  }
  static constexpr InfoField<Task> tendon_velocity() {
    return MujocoTask<Task>::per_tendon("tendon_velocity", &mjData::ten_velocity);
  }
  // clip(weight * sum(cfrc_ext ** 2), lo, hi)
  double contact_cost(double weight, double lo, double hi) const {
    return clip(weight * np_sum_sq(this->d_->cfrc_ext, 6 * this->m_->nbody), lo, hi);
  }

  bool cinert_, cvel_, qfrc_actuator_, cfrc_ext_;
};

// --------------------------------------------------------------- Humanoid --
class Humanoid : public HumanoidTask<Humanoid>, public Locomotion {
 public:
  static constexpr TaskTraits kTraits{"Humanoid-v5", "humanoid.xml", 5, 1000, kInf};

  static std::vector<OptionSpec> TaskOptions() {
    std::vector<OptionSpec> v = {detail::weight_option("forward_reward", 1.25, "forward reward"),
                                 detail::weight_option("ctrl_cost", 0.1, "control cost"),
                                 detail::weight_option("contact_cost", 5e-7, "contact cost")};
    detail::add_range(v, "contact_cost", -kInf, 10.0, "clip of the contact cost");
    v.push_back(detail::healthy_reward_option(5.0));
    v.push_back(detail::terminate_option());
    detail::add_range(v, "healthy_z", 1.0, 2.0, "bound of the torso height");
    v.push_back(detail::noise_option(1e-2));
    AddObsOptions(v);
    return v;
  }
  static const auto& info_fields() {
    using L = LocomotionInfo<Humanoid>;
    static constexpr Field kFields[] = {
        L::x_position, L::y_position, tendon_length(), tendon_velocity(),
        L::distance_from_origin, L::x_velocity, L::y_velocity, L::reward_survive,
        L::reward_forward, L::reward_ctrl, scalar("reward_contact", &Humanoid::reward_contact_)};
    return kFields;
  }

  explicit Humanoid(const EnvOptions& o)
      : HumanoidTask(o),
        Locomotion(o),
        contact_w_(o.f("contact_cost_weight")),
        contact_min_(o.f("contact_cost_min")),
        contact_max_(o.f("contact_cost_max")),
        health_(o) {
    double total = 0.0;
    for (int b = 0; b < m_->nbody; ++b) total += m_->body_mass[b];
    total_mass_ = total;
  }

 protected:
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
  void set_reset_info() override { set_planar_position(d_->qpos); }
  StepResult step_task(const double* action, double* obs) override {
    double before[2], after[2];
    mass_center(before);
    do_simulation(action);
    mass_center(after);
    y_velocity = velocity(before[1], after[1]);
    const double ctrl_cost = forward_and_ctrl(velocity(before[0], after[0]), d_->ctrl, m_->nu);
    write_obs(obs);
    const double z = d_->qpos[2];
    const double contact = contact_cost(contact_w_, contact_min_, contact_max_);
    reward_contact_ = -contact;
    set_planar_position(d_->qpos);
    return healthy_step(health_.z_min < z && z < health_.z_max, health_, ctrl_cost + contact);
  }

  double contact_w_, contact_min_, contact_max_;
  Health health_;
  double total_mass_ = 1.0;
  double reward_contact_ = 0;
};

}  // namespace mujoco_envs
}  // namespace torchfrag
