// swimmer6 and swimmer15 (dm_control/suite/swimmer.py).  The model is built by
// dm_control from a template (a chain of N bodies with a motor, a velocimeter
// and a gyro each); torchfrag/_dmc_models.py writes the same XML into
// TORCHFRAG_DMC_GENERATED as swimmer<N>.xml.
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

template <int kBodies>
class Swimmer : public DmcEnv {
 public:
  // target0: the target geom's x and y, drawn at reset.
  static constexpr DmcTraits kTraits{kBodies == 6 ? "SwimmerSwimmer6-v1" : "SwimmerSwimmer15-v1",
                                     kBodies == 6 ? "swimmer6.xml" : "swimmer15.xml", 30.0, 0.03,
                                     2};
  // joints (the chain's hinges), to_target (2), body_velocities (vx, vy, wz per body).
  static int64_t ObsSize(const mjModel* m) { return (m->nq - 3) + 2 + 3 * kBodies; }

  explicit Swimmer(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        target_(id_of(mjOBJ_GEOM, "target")),
        nose_(id_of(mjOBJ_GEOM, "nose")),
        head_(id_of(mjOBJ_BODY, "head")),
        light_(id_of(mjOBJ_LIGHT, "target_light")),
        // sensordata[12:]: after nose_pos, target_pos and the head's x and y axes.
        velocities_(sensor_adr("head_vel")) {}

 protected:
  void initialize_episode(Rng& rng) override {
    randomize_joints(rng);
    const bool close_target = rng.uniform() < .2;
    const double box = close_target ? .3 : 2;
    const double x = rng.uniform(-box, box);
    const double y = rng.uniform(-box, box);
    m_->geom_pos[3 * target_] = x;
    m_->geom_pos[3 * target_ + 1] = y;
    m_->light_pos[3 * light_] = x;
    m_->light_pos[3 * light_ + 1] = y;
  }
  void write_target(double* out) const override {
    out[0] = m_->geom_pos[3 * target_];
    out[1] = m_->geom_pos[3 * target_ + 1];
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos + 3, m_->nq - 3);
    double to_target[2];
    nose_to_target(to_target);
    w.put(to_target[0]);
    w.put(to_target[1]);
    for (int b = 0; b < kBodies; ++b) {
      const double* s = d_->sensordata + velocities_ + 6 * b;  // velocimeter xyz, gyro xyz
      w.put(s[0]);
      w.put(s[1]);
      w.put(s[5]);
    }
  }
  double reward() const override {
    double v[2];
    nose_to_target(v);
    const double size = m_->geom_size[3 * target_];
    return Tolerance{0, size, 5 * size, Sigmoid::kLongTail}(mujoco_envs::norm(v, 2));
  }

 private:
  // (target - nose) in the head's frame, x and y: the row vector times xmat.
  void nose_to_target(double* out) const {
    const double* t = d_->geom_xpos + 3 * target_;
    const double* n = d_->geom_xpos + 3 * nose_;
    const double diff[3] = {t[0] - n[0], t[1] - n[1], t[2] - n[2]};
    const double* r = d_->xmat + 9 * head_;
    for (int j = 0; j < 2; ++j) out[j] = diff[0] * r[j] + diff[1] * r[3 + j] + diff[2] * r[6 + j];
  }

  int target_, nose_, head_, light_, velocities_;
};

using SwimmerSwimmer6 = Swimmer<6>;
using SwimmerSwimmer15 = Swimmer<15>;

}  // namespace dmc
}  // namespace torchfrag
