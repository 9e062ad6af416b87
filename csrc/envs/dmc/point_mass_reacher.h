// point_mass easy (dm_control/suite/point_mass.py) and reacher easy and hard
// (reacher.py).
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

class PointMassEasy : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{"PointMassEasy-v1", "point_mass.xml", 20.0, 0.0, 0};
  static int64_t ObsSize(const mjModel* m) { return m->nq + m->nv; }  // position, velocity

  explicit PointMassEasy(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        target_(id_of(mjOBJ_GEOM, "target")),
        mass_(id_of(mjOBJ_GEOM, "pointmass")) {}

 protected:
  void initialize_episode(Rng& rng) override { randomize_joints(rng); }
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
    double control_sum = 0.0;
    const Tolerance small{0, 0, 1, Sigmoid::kQuadratic, 0};
    for (int k = 0; k < m_->nu; ++k) control_sum += small(d_->ctrl[k]);
    const double small_control = (control_sum / m_->nu + 4) / 5;
    return near_target * small_control;
  }

 private:
  int target_, mass_;
};

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
