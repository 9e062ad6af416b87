// cartpole (dm_control/suite/cartpole.py): balance, swingup and their sparse
// variants, one pole.
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

template <bool kSwingUp, bool kSparse>
class Cartpole : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{
      kSwingUp ? (kSparse ? "CartpoleSwingupSparse-v1" : "CartpoleSwingup-v1")
               : (kSparse ? "CartpoleBalanceSparse-v1" : "CartpoleBalance-v1"),
      "cartpole.xml", 10.0, 0.0, 0};
  // position: cart x then (zz, xz) of every pole; velocity: qvel.
  static int64_t ObsSize(const mjModel* m) { return 1 + 2 * (m->nbody - 2) + m->nv; }

  explicit Cartpole(const EnvOptions& o) : DmcEnv(kTraits, o) {}

 protected:
  void initialize_episode(Rng& rng) override {
    const int nv = m_->nv;
    if (kSwingUp) {
      d_->qpos[0] = .01 * rng.normal();
      d_->qpos[1] = M_PI + .01 * rng.normal();
      for (int k = 2; k < nv; ++k) d_->qpos[k] = .1 * rng.normal();
    } else {
      d_->qpos[0] = rng.uniform(-.1, .1);
      for (int k = 1; k < nv; ++k) d_->qpos[k] = rng.uniform(-.034, .034);
    }
    for (int k = 0; k < nv; ++k) d_->qvel[k] = 0.01 * rng.normal();
  }

  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(d_->qpos[0]);
    for (int b = 2; b < m_->nbody; ++b) {
      w.put(xmat(b, 8));
      w.put(xmat(b, 2));
    }
    w.copy(d_->qvel, m_->nv);
  }

  double reward() const override {
    const double cart = d_->qpos[0];
    if (kSparse) {
      double angle_in_bounds = 1.0;
      for (int b = 2; b < m_->nbody; ++b) angle_in_bounds *= Tolerance{0.995, 1}(xmat(b, 8));
      return Tolerance{-.25, .25}(cart) * angle_in_bounds;
    }
    double upright_sum = 0.0;
    for (int b = 2; b < m_->nbody; ++b) upright_sum += (xmat(b, 8) + 1) / 2;
    const double upright = upright_sum / (m_->nbody - 2);
    const double centered = (1 + Tolerance{0, 0, 2}(cart)) / 2;
    const double small_control =
        (4 + Tolerance{0, 0, 1, Sigmoid::kQuadratic, 0}(d_->ctrl[0])) / 5;
    double small_velocity = 1.0;
    for (int k = 1; k < m_->nv; ++k) {
      small_velocity = std::min(small_velocity, Tolerance{0, 0, 5}(d_->qvel[k]));
    }
    small_velocity = (1 + small_velocity) / 2;
    return upright * small_control * small_velocity * centered;
  }
};

using CartpoleBalance = Cartpole<false, false>;
using CartpoleBalanceSparse = Cartpole<false, true>;
using CartpoleSwingup = Cartpole<true, false>;
using CartpoleSwingupSparse = Cartpole<true, true>;

}  // namespace dmc
}  // namespace torchfrag
