// cheetah run (dm_control/suite/cheetah.py) and walker stand, walk and run
// (walker.py).
#pragma once

#include <cmath>
#include <vector>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

class CheetahRun : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{"CheetahRun-v1", "cheetah.xml", 10.0, 0.0, 0};
  static int64_t ObsSize(const mjModel* m) { return m->nq - 1 + m->nv; }

  explicit CheetahRun(const EnvOptions& o)
      : DmcEnv(kTraits, o), speed_(sensor_adr("torso_subtreelinvel")) {
    if (m_->nq != m_->njnt) throw std::invalid_argument("CheetahRun-v1 needs nq == njnt");
  }

 protected:
  // Limited joints uniform in their range, then 200 physics steps at rest
  // (zero control) so the cheetah lands; the clock restarts at 0.
  void initialize_episode(Rng& rng) override {
    for (int j = 0; j < m_->njnt; ++j) {
      if (m_->jnt_limited[j]) d_->qpos[j] = rng.uniform(m_->jnt_range[2 * j], m_->jnt_range[2 * j + 1]);
    }
    physics_step(200);
    d_->time = 0;
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos + 1, m_->nq - 1);
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    return Tolerance{10, kInf, 10, Sigmoid::kLinear, 0}(d_->sensordata[speed_]);
  }

 private:
  int speed_;
};

template <int kMoveSpeed>
class Walker : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{
      kMoveSpeed == 0 ? "WalkerStand-v1" : (kMoveSpeed == 1 ? "WalkerWalk-v1" : "WalkerRun-v1"),
      "walker.xml", 25.0, 0.025, 0};
  // orientations (xx, xz of every body but the world), height, velocity.
  static int64_t ObsSize(const mjModel* m) { return 2 * (m->nbody - 1) + 1 + m->nv; }

  explicit Walker(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        torso_(id_of(mjOBJ_BODY, "torso")),
        speed_(sensor_adr("torso_subtreelinvel")) {}

 protected:
  void initialize_episode(Rng& rng) override { randomize_joints(rng); }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    for (int b = 1; b < m_->nbody; ++b) {
      w.put(xmat(b, 0));
      w.put(xmat(b, 2));
    }
    w.put(d_->xpos[3 * torso_ + 2]);
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    constexpr double kStandHeight = 1.2;
    const double standing =
        Tolerance{kStandHeight, kInf, kStandHeight / 2}(d_->xpos[3 * torso_ + 2]);
    const double upright = (1 + xmat(torso_, 8)) / 2;
    const double stand_reward = (3 * standing + upright) / 4;
    if (kMoveSpeed == 0) return stand_reward;
    const double move_reward = Tolerance{double(kMoveSpeed), kInf, kMoveSpeed / 2.0,
                                         Sigmoid::kLinear, 0.5}(d_->sensordata[speed_]);
    return stand_reward * (5 * move_reward + 1) / 6;
  }

 private:
  int torso_, speed_;
};

using WalkerStand = Walker<0>;
using WalkerWalk = Walker<1>;
using WalkerRun = Walker<8>;

}  // namespace dmc
}  // namespace torchfrag
