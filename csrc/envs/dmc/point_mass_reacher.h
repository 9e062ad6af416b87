// point_mass easy and hard (dm_control/suite/point_mass.py) and reacher easy and hard
// (reacher.py).
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

// Hard randomises the actuator gains: each control drives a random unit
// direction of the two joints (the tendons' wrap_prm; `target0` holds them).
template <bool kRandomizeGains>
class PointMass : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{kRandomizeGains ? "PointMassHard-v1" : "PointMassEasy-v1",
                                     "point_mass.xml", 20.0, 0.0, kRandomizeGains ? 4 : 0};
  static int64_t ObsSize(const mjModel* m) { return m->nq + m->nv; }  // position, velocity

  explicit PointMass(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        target_(id_of(mjOBJ_GEOM, "target")),
        mass_(id_of(mjOBJ_GEOM, "pointmass")) {}

 protected:
  void initialize_episode(Rng& rng) override {
    randomize_joints(rng);
    if (!kRandomizeGains) return;
    double dir1[2], dir2[2];
    unit_direction(rng, dir1);
    do {
      unit_direction(rng, dir2);
    } while (std::abs(dir1[0] * dir2[0] + dir1[1] * dir2[1]) > 0.9);
    m_->wrap_prm[0] = dir1[0];
    m_->wrap_prm[1] = dir1[1];
    m_->wrap_prm[2] = dir2[0];
    m_->wrap_prm[3] = dir2[1];
  }
  void write_target(double* out) const override {
    for (int k = 0; k < 4; ++k) out[k] = m_->wrap_prm[k];
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, m_->nq);
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    const double* t = d_->geom_xpos + 3 * target_;
    const double* p = d_->geom_xpos + 3 * mass_;
    const double v[3] = {t[0] - p[0], t[1] - p[1], t[2] - p[2]};
    const double size = m_->geom_size[3 * target_];
    const double near_target = Tolerance{0, size, size}(mujoco_envs::norm(v, 3));
    const double small_control = (small_control_mean() + 4) / 5;
    return near_target * small_control;
  }

 private:
  static void unit_direction(Rng& rng, double* dir) {
    dir[0] = rng.normal();
    dir[1] = rng.normal();
    const double n = mujoco_envs::norm(dir, 2);
    dir[0] /= n;
    dir[1] /= n;
  }

  int target_, mass_;
};

using PointMassEasy = PointMass<false>;
using PointMassHard = PointMass<true>;

template <bool kHard>
class Reacher : public DmcEnv {
 public:
  // target0: the target geom's x and y, drawn at reset.
  static constexpr DmcTraits kTraits{kHard ? "ReacherHard-v1" : "ReacherEasy-v1", "reacher.xml",
                                     20.0, 0.0, 2};
  static int64_t ObsSize(const mjModel* m) { return m->nq + 2 + m->nv; }

  explicit Reacher(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        target_(id_of(mjOBJ_GEOM, "target")),
        finger_(id_of(mjOBJ_GEOM, "finger")) {}

 protected:
  void initialize_episode(Rng& rng) override {
    m_->geom_size[3 * target_] = kHard ? .015 : .05;
    randomize_joints(rng);
    const double angle = rng.uniform(0, 2 * M_PI);
    const double radius = rng.uniform(.05, .2);
    m_->geom_pos[3 * target_] = radius * std::sin(angle);
    m_->geom_pos[3 * target_ + 1] = radius * std::cos(angle);
  }
  void write_target(double* out) const override {
    out[0] = m_->geom_pos[3 * target_];
    out[1] = m_->geom_pos[3 * target_ + 1];
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, m_->nq);
    const double* t = d_->geom_xpos + 3 * target_;
    const double* f = d_->geom_xpos + 3 * finger_;
    w.put(t[0] - f[0]);
    w.put(t[1] - f[1]);
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    const double* t = d_->geom_xpos + 3 * target_;
    const double* f = d_->geom_xpos + 3 * finger_;
    const double v[2] = {t[0] - f[0], t[1] - f[1]};
    const double radii = m_->geom_size[3 * target_] + m_->geom_size[3 * finger_];
    return Tolerance{0, radii}(mujoco_envs::norm(v, 2));
  }

 private:
  int target_, finger_;
};

using ReacherEasy = Reacher<false>;
using ReacherHard = Reacher<true>;

}  // namespace dmc
}  // namespace torchfrag
