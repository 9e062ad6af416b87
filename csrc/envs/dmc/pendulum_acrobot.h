// pendulum swingup (dm_control/suite/pendulum.py) and acrobot swingup and
// swingup_sparse (acrobot.py).
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

class PendulumSwingup : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{"PendulumSwingup-v1", "pendulum.xml", 20.0, 0.0, 0};
  static int64_t ObsSize(const mjModel*) { return 3; }  // orientation (zz, xz), velocity

  explicit PendulumSwingup(const EnvOptions& o)
      : DmcEnv(kTraits, o), pole_(id_of(mjOBJ_BODY, "pole")) {}

 protected:
  void initialize_episode(Rng& rng) override { d_->qpos[0] = rng.uniform(-M_PI, M_PI); }
  void write_obs(double* obs) const override {
    obs[0] = xmat(pole_, 8);
    obs[1] = xmat(pole_, 2);
    obs[2] = d_->qvel[0];
  }
  double reward() const override {
    // _COSINE_BOUND = np.cos(np.deg2rad(8)); deg2rad multiplies by pi/180.
    static const double cosine_bound = std::cos(8.0 * (M_PI / 180.0));
    return Tolerance{cosine_bound, 1}(xmat(pole_, 8));
  }

 private:
  int pole_;
};

template <bool kSparse>
class Acrobot : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{
      kSparse ? "AcrobotSwingupSparse-v1" : "AcrobotSwingup-v1", "acrobot.xml", 10.0, 0.0, 0};
  static int64_t ObsSize(const mjModel*) { return 6; }  // orientations (4), velocity (2)

  explicit Acrobot(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        upper_(id_of(mjOBJ_BODY, "upper_arm")),
        lower_(id_of(mjOBJ_BODY, "lower_arm")),
        shoulder_(m_->jnt_qposadr[id_of(mjOBJ_JOINT, "shoulder")]),
        elbow_(m_->jnt_qposadr[id_of(mjOBJ_JOINT, "elbow")]),
        target_(id_of(mjOBJ_SITE, "target")),
        tip_(id_of(mjOBJ_SITE, "tip")) {}

 protected:
  void initialize_episode(Rng& rng) override {
    d_->qpos[shoulder_] = rng.uniform(-M_PI, M_PI);
    d_->qpos[elbow_] = rng.uniform(-M_PI, M_PI);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.put(xmat(upper_, 2));
    w.put(xmat(lower_, 2));
    w.put(xmat(upper_, 8));
    w.put(xmat(lower_, 8));
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    const double* a = d_->site_xpos + 3 * target_;
    const double* b = d_->site_xpos + 3 * tip_;
    const double v[3] = {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
    const double dist = mujoco_envs::norm(v, 3);
    return Tolerance{0, m_->site_size[3 * target_], kSparse ? 0.0 : 1.0}(dist);
  }

 private:
  int upper_, lower_, shoulder_, elbow_, target_, tip_;
};

using AcrobotSwingup = Acrobot<false>;
using AcrobotSwingupSparse = Acrobot<true>;

}  // namespace dmc
}  // namespace torchfrag
