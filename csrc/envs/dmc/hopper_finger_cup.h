// hopper stand and hop (dm_control/suite/hopper.py), finger spin, turn_easy
// and turn_hard (finger.py) and ball_in_cup catch (ball_in_cup.py).
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

template <bool kHopping>
class Hopper : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{kHopping ? "HopperHop-v1" : "HopperStand-v1", "hopper.xml",
                                     20.0, 0.02, 0};
  static int64_t ObsSize(const mjModel* m) { return m->nq - 1 + m->nv + 2; }  // ..., touch

  explicit Hopper(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        torso_(id_of(mjOBJ_BODY, "torso")),
        foot_(id_of(mjOBJ_BODY, "foot")),
        speed_(sensor_adr("torso_subtreelinvel")),
        toe_(sensor_adr("touch_toe")),
        heel_(sensor_adr("touch_heel")) {}

 protected:
  void initialize_episode(Rng& rng) override { randomize_joints(rng); }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos + 1, m_->nq - 1);
    w.copy(d_->qvel, m_->nv);
    w.put(std::log1p(d_->sensordata[toe_]));
    w.put(std::log1p(d_->sensordata[heel_]));
  }
  double reward() const override {
    const double height = d_->xipos[3 * torso_ + 2] - d_->xipos[3 * foot_ + 2];
    const double standing = Tolerance{0.6, 2}(height);
    if (kHopping) {
      return standing * Tolerance{2, kInf, 1, Sigmoid::kLinear, 0.5}(d_->sensordata[speed_]);
    }
    return standing * ((small_control_mean() + 4) / 5);
  }

 private:
  int torso_, foot_, speed_, toe_, heel_;
};

// The three finger tasks share physics and the first observation keys; Turn
// also places a target on the spinner's circle (`target0`: its site x, z).
template <int kTask>  // 0: spin, 1: turn_easy, 2: turn_hard
class Finger : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{
      kTask == 0 ? "FingerSpin-v1" : (kTask == 1 ? "FingerTurnEasy-v1" : "FingerTurnHard-v1"),
      "finger.xml", 20.0, 0.02, kTask == 0 ? 0 : 2};
  // position 4, velocity 3, touch 2 (+ target_position 2, dist_to_target 1).
  static int64_t ObsSize(const mjModel*) { return kTask == 0 ? 9 : 12; }

  explicit Finger(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        proximal_(sensor_adr("proximal")),
        distal_(sensor_adr("distal")),
        tip_(sensor_adr("tip")),
        spinner_(sensor_adr("spinner")),
        target_(sensor_adr("target")),
        proximal_vel_(sensor_adr("proximal_velocity")),
        distal_vel_(sensor_adr("distal_velocity")),
        hinge_vel_(sensor_adr("hinge_velocity")),
        touchtop_(sensor_adr("touchtop")),
        touchbottom_(sensor_adr("touchbottom")),
        target_site_(id_of(mjOBJ_SITE, "target")),
        tip_site_(id_of(mjOBJ_SITE, "tip")),
        hinge_(id_of(mjOBJ_JOINT, "hinge")),
        cap1_(id_of(mjOBJ_GEOM, "cap1")) {}

 protected:
  void initialize_episode(Rng& rng) override {
    if (kTask == 0) {
      m_->site_rgba[4 * target_site_ + 3] = 0;
      m_->site_rgba[4 * tip_site_ + 3] = 0;
      m_->dof_damping[m_->jnt_dofadr[hinge_]] = 0.03;
    } else {
      const double angle = rng.uniform(-M_PI, M_PI);
      const double hinge_x = d_->xanchor[3 * hinge_], hinge_z = d_->xanchor[3 * hinge_ + 2];
      const double* size = m_->geom_size + 3 * cap1_;
      const double radius = (size[0] + size[1]) + size[2];  // np.sum of 3: left to right
      m_->site_pos[3 * target_site_] = hinge_x + radius * std::sin(angle);
      m_->site_pos[3 * target_site_ + 2] = hinge_z + radius * std::cos(angle);
      m_->site_size[3 * target_site_] = kTask == 1 ? 0.07 : 0.03;
    }
    // _set_random_joint_angles: redraw until nothing touches.
    for (int attempt = 0;; ++attempt) {
      if (attempt == 1000) {
        throw std::runtime_error("finger: no collision-free start state after 1000 attempts");
      }
      randomize_joints(rng);
      forward_without_actuation();
      if (d_->ncon == 0) break;
    }
  }
  void write_target(double* out) const override {
    out[0] = m_->site_pos[3 * target_site_];
    out[1] = m_->site_pos[3 * target_site_ + 2];
  }
  void write_obs(double* obs) const override {
    const double* s = d_->sensordata;
    ObsWriter w{obs};
    w.put(s[proximal_]);
    w.put(s[distal_]);
    w.put(s[tip_] - s[spinner_]);
    w.put(s[tip_ + 2] - s[spinner_ + 2]);
    w.put(s[proximal_vel_]);
    w.put(s[distal_vel_]);
    w.put(s[hinge_vel_]);
    w.put(std::log1p(s[touchtop_]));
    w.put(std::log1p(s[touchbottom_]));
    if (kTask != 0) {
      w.put(s[target_] - s[spinner_]);
      w.put(s[target_ + 2] - s[spinner_ + 2]);
      w.put(dist_to_target());
    }
  }
  double reward() const override {
    if (kTask == 0) return d_->sensordata[hinge_vel_] <= -15.0 ? 1.0 : 0.0;
    return dist_to_target() <= 0 ? 1.0 : 0.0;
  }

 private:
  // |target - tip| (both relative to the spinner) minus the target's radius.
  double dist_to_target() const {
    const double* s = d_->sensordata;
    const double v[2] = {(s[target_] - s[spinner_]) - (s[tip_] - s[spinner_]),
                         (s[target_ + 2] - s[spinner_ + 2]) - (s[tip_ + 2] - s[spinner_ + 2])};
    return mujoco_envs::norm(v, 2) - m_->site_size[3 * target_site_];
  }

  int proximal_, distal_, tip_, spinner_, target_, proximal_vel_, distal_vel_, hinge_vel_,
      touchtop_, touchbottom_, target_site_, tip_site_, hinge_, cap1_;
};

class BallInCupCatch : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{"BallInCupCatch-v1", "ball_in_cup.xml", 20.0, 0.02, 0};
  static int64_t ObsSize(const mjModel* m) { return m->nq + m->nv; }

  explicit BallInCupCatch(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        ball_x_(m_->jnt_qposadr[id_of(mjOBJ_JOINT, "ball_x")]),
        ball_z_(m_->jnt_qposadr[id_of(mjOBJ_JOINT, "ball_z")]),
        target_(id_of(mjOBJ_SITE, "target")),
        ball_(id_of(mjOBJ_BODY, "ball")),
        ball_geom_(id_of(mjOBJ_GEOM, "ball")) {}

 protected:
  // The ball anywhere in the air above the cup where it touches nothing.
  void initialize_episode(Rng& rng) override {
    do {
      d_->qpos[ball_x_] = rng.uniform(-.2, .2);
      d_->qpos[ball_z_] = rng.uniform(.2, .5);
      forward_without_actuation();
    } while (d_->ncon > 0);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos, m_->nq);
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    const double ball_size = m_->geom_size[3 * ball_geom_];
    const double dx = std::abs(d_->site_xpos[3 * target_] - d_->xpos[3 * ball_]);
    const double dz = std::abs(d_->site_xpos[3 * target_ + 2] - d_->xpos[3 * ball_ + 2]);
    return (dx < m_->site_size[3 * target_] - ball_size &&
            dz < m_->site_size[3 * target_ + 2] - ball_size)
               ? 1.0
               : 0.0;
  }

 private:
  int ball_x_, ball_z_, target_, ball_, ball_geom_;
};

using HopperStand = Hopper<false>;
using HopperHop = Hopper<true>;
using FingerSpin = Finger<0>;
using FingerTurnEasy = Finger<1>;
using FingerTurnHard = Finger<2>;

}  // namespace dmc
}  // namespace torchfrag
