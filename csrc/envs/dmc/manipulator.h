// manipulator bring_ball, bring_peg, insert_ball and insert_peg
// (dm_control/suite/manipulator.py).  dm_control removes the props a task does
// not use from manipulator.xml; torchfrag/_dmc_models.py writes the same
// models into TORCHFRAG_DMC_GENERATED as manipulator_<task>.xml.
#pragma once

#include <cmath>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

template <bool kPeg, bool kInsert>
class Manipulator : public DmcEnv {
 public:
  static constexpr const char* kId =
      kPeg ? (kInsert ? "ManipulatorInsertPeg-v1" : "ManipulatorBringPeg-v1")
           : (kInsert ? "ManipulatorInsertBall-v1" : "ManipulatorBringBall-v1");
  static constexpr const char* kXml =
      kPeg ? (kInsert ? "manipulator_insert_peg.xml" : "manipulator_bring_peg.xml")
           : (kInsert ? "manipulator_insert_ball.xml" : "manipulator_bring_ball.xml");
  // target0: the target body's x, z, qw and qy (the receptacle's too when inserting).
  static constexpr DmcTraits kTraits{kId, kXml, 10.0, 0.01, 4};
  // arm_pos (sin, cos of 8 joints), arm_vel (8), touch (5), hand_pos, object_pos (x, z, qw,
  // qy each), object_vel (3), target_pos (4).
  static int64_t ObsSize(const mjModel*) { return 16 + 8 + 5 + 4 + 4 + 3 + 4; }

  explicit Manipulator(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        target_(id_of(mjOBJ_BODY, kPeg ? "target_peg" : "target_ball")),
        object_(id_of(mjOBJ_BODY, kPeg ? "peg" : "ball")),
        receptacle_(kInsert ? id_of(mjOBJ_BODY, kPeg ? "slot" : "cup") : -1),
        hand_(id_of(mjOBJ_BODY, "hand")),
        grasp_(id_of(mjOBJ_SITE, "grasp")),
        touch_(sensor_adr("palm_touch")) {
    static const char* const kArm[8] = {"arm_root", "arm_shoulder", "arm_elbow", "arm_wrist",
                                        "finger",   "fingertip",    "thumb",     "thumbtip"};
    for (int k = 0; k < 8; ++k) arm_[k] = id_of(mjOBJ_JOINT, kArm[k]);
    static const char* const kObj[3] = {kPeg ? "peg_x" : "ball_x", kPeg ? "peg_z" : "ball_z",
                                        kPeg ? "peg_y" : "ball_y"};
    for (int k = 0; k < 3; ++k) object_joints_[k] = id_of(mjOBJ_JOINT, kObj[k]);
    if (kPeg) {
      peg_sites_[0] = id_of(mjOBJ_SITE, "peg_grasp");
      peg_sites_[1] = id_of(mjOBJ_SITE, "peg_pinch");
      peg_sites_[2] = id_of(mjOBJ_SITE, "pinch");
      peg_sites_[3] = id_of(mjOBJ_SITE, "peg");
      peg_sites_[4] = id_of(mjOBJ_SITE, "target_peg");
      peg_sites_[5] = id_of(mjOBJ_SITE, "target_peg_tip");
      peg_sites_[6] = id_of(mjOBJ_SITE, "peg_tip");
    } else {
      ball_sites_[0] = id_of(mjOBJ_SITE, "ball");
      ball_sites_[1] = id_of(mjOBJ_SITE, "target_ball");
    }
  }

 protected:
  // Redraws until nothing penetrates (dm_control's loop); the object starts in the
  // hand, in the target or anywhere with probabilities .1, .1 and .8.
  void initialize_episode(Rng& rng) override {
    do {
      for (int k = 0; k < 8; ++k) {
        const int j = arm_[k];
        const bool limited = m_->jnt_limited[j] != 0;
        const double lo = limited ? m_->jnt_range[2 * j] : -M_PI;
        const double hi = limited ? m_->jnt_range[2 * j + 1] : M_PI;
        d_->qpos[m_->jnt_qposadr[j]] = rng.uniform(lo, hi);
      }
      d_->qpos[m_->jnt_qposadr[arm_[4]]] = d_->qpos[m_->jnt_qposadr[arm_[6]]];  // finger = thumb
      const double target_x = rng.uniform(-.4, .4);
      const double target_z = rng.uniform(.1, .4);
      const double target_angle =
          kInsert ? rng.uniform(-M_PI / 3, M_PI / 3) : rng.uniform(-M_PI, M_PI);
      if (kInsert) place(receptacle_, target_x, target_z, target_angle);
      place(target_, target_x, target_z, target_angle);
      const double u = rng.uniform();
      double x, z, angle;
      if (u < .1) {  // in hand
        forward_without_actuation();
        x = d_->site_xpos[3 * grasp_];
        z = d_->site_xpos[3 * grasp_ + 2];
        const double* r = d_->site_xmat + 9 * grasp_;
        angle = M_PI - std::atan2(r[6], r[0]);  // xmat's zx and xx
      } else if (u < .2) {  // in target
        x = target_x;
        z = target_z;
        angle = target_angle;
      } else {
        x = rng.uniform(-.5, .5);
        z = rng.uniform(0, .7);
        angle = rng.uniform(0, 2 * M_PI);
        d_->qvel[m_->jnt_dofadr[object_joints_[0]]] = rng.uniform(-5, 5);
      }
      d_->qpos[m_->jnt_qposadr[object_joints_[0]]] = x;
      d_->qpos[m_->jnt_qposadr[object_joints_[1]]] = z;
      d_->qpos[m_->jnt_qposadr[object_joints_[2]]] = angle;
      forward_without_actuation();
    } while (d_->ncon > 0);
  }
  void write_target(double* out) const override {
    out[0] = m_->body_pos[3 * target_];
    out[1] = m_->body_pos[3 * target_ + 2];
    out[2] = m_->body_quat[4 * target_];
    out[3] = m_->body_quat[4 * target_ + 2];
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    for (int k = 0; k < 8; ++k) {
      const double q = d_->qpos[m_->jnt_qposadr[arm_[k]]];
      w.put(std::sin(q));
      w.put(std::cos(q));
    }
    for (int k = 0; k < 8; ++k) w.put(d_->qvel[m_->jnt_dofadr[arm_[k]]]);
    for (int k = 0; k < 5; ++k) w.put(std::log1p(d_->sensordata[touch_ + k]));
    pose(w, hand_);
    pose(w, object_);
    for (int k = 0; k < 3; ++k) w.put(d_->qvel[m_->jnt_dofadr[object_joints_[k]]]);
    pose(w, target_);
  }
  double reward() const override {
    if (!kPeg) return close(site_distance(ball_sites_[0], ball_sites_[1]));
    const double grasping = (close(site_distance(peg_sites_[0], grasp_)) +
                             close(site_distance(peg_sites_[1], peg_sites_[2]))) / 2;
    const double bringing = (close(site_distance(peg_sites_[3], peg_sites_[4])) +
                             close(site_distance(peg_sites_[5], peg_sites_[6]))) / 2;
    return std::max(bringing, grasping / 3);
  }

 private:
  void place(int body, double x, double z, double angle) {
    m_->body_pos[3 * body] = x;
    m_->body_pos[3 * body + 2] = z;
    m_->body_quat[4 * body] = std::cos(angle / 2);
    m_->body_quat[4 * body + 2] = std::sin(angle / 2);
  }
  // body_2d_pose: xpos x, z and xquat w, y.
  void pose(ObsWriter& w, int body) const {
    w.put(d_->xpos[3 * body]);
    w.put(d_->xpos[3 * body + 2]);
    w.put(d_->xquat[4 * body]);
    w.put(d_->xquat[4 * body + 2]);
  }
  // np.linalg.norm(np.diff(site_xpos[[b, a]])): the components of a - b.
  double site_distance(int a, int b) const {
    const double* p = d_->site_xpos + 3 * a;
    const double* q = d_->site_xpos + 3 * b;
    const double v[3] = {p[0] - q[0], p[1] - q[1], p[2] - q[2]};
    return mujoco_envs::norm(v, 3);
  }
  static double close(double distance) { return Tolerance{0, .01, .02}(distance); }

  int target_, object_, receptacle_, hand_, grasp_, touch_;
  int arm_[8], object_joints_[3];
  int peg_sites_[7] = {}, ball_sites_[2] = {};
};

using ManipulatorBringBall = Manipulator<false, false>;
using ManipulatorBringPeg = Manipulator<true, false>;
using ManipulatorInsertBall = Manipulator<false, true>;
using ManipulatorInsertPeg = Manipulator<true, true>;

}  // namespace dmc
}  // namespace torchfrag
