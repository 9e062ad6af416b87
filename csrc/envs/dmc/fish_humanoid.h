// fish upright and swim (dm_control/suite/fish.py), humanoid stand, walk and
// run (humanoid.py).
#pragma once

#include <cmath>
#include <vector>

#include "../dmc_env.h"

namespace torchfrag {
namespace dmc {

// v . M for a 3-vector and a row-major 3x3 matrix (NumPy's vec.dot(mat)): v
// expressed in the frame whose axes are M's columns.
inline void in_frame(const double* v, const double* mat, double* out) {
  for (int j = 0; j < 3; ++j) out[j] = v[0] * mat[j] + v[1] * mat[3 + j] + v[2] * mat[6 + j];
}

template <bool kSwim>
class Fish : public DmcEnv {
 public:
  // target0 (swim): the target geom's x, y, z.
  static constexpr DmcTraits kTraits{kSwim ? "FishSwim-v1" : "FishUpright-v1", "fish.xml", 40.0,
                                     0.04, kSwim ? 3 : 0};
  // joint_angles 7, upright, (target 3,) velocity.
  static int64_t ObsSize(const mjModel* m) { return 7 + 1 + (kSwim ? 3 : 0) + m->nv; }

  explicit Fish(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        root_(m_->jnt_qposadr[id_of(mjOBJ_JOINT, "root")]),
        torso_(id_of(mjOBJ_BODY, "torso")),
        target_(id_of(mjOBJ_GEOM, "target")),
        mouth_(id_of(mjOBJ_GEOM, "mouth")) {
    for (const char* j : {"tail1", "tail_twist", "tail2", "finright_roll", "finright_pitch",
                          "finleft_roll", "finleft_pitch"}) {
      const int id = id_of(mjOBJ_JOINT, j);
      joint_qpos_.push_back(m_->jnt_qposadr[id]);
      joint_dof_.push_back(m_->jnt_dofadr[id]);
    }
  }

 protected:
  void initialize_episode(Rng& rng) override {
    double q[4];
    for (double& v : q) v = rng.normal();
    const double n = mujoco_envs::norm(q, 4);
    for (int k = 0; k < 4; ++k) d_->qpos[root_ + 3 + k] = q[k] / n;
    for (int adr : joint_qpos_) d_->qpos[adr] = rng.uniform(-.2, .2);
    if (kSwim) {
      m_->geom_pos[3 * target_] = rng.uniform(-.4, .4);
      m_->geom_pos[3 * target_ + 1] = rng.uniform(-.4, .4);
      m_->geom_pos[3 * target_ + 2] = rng.uniform(.1, .3);
    } else {
      m_->geom_rgba[4 * target_ + 3] = 0;
    }
  }
  void write_target(double* out) const override {
    for (int k = 0; k < 3; ++k) out[k] = m_->geom_pos[3 * target_ + k];
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    for (int adr : joint_qpos_) w.put(d_->qpos[adr]);
    w.put(xmat(torso_, 8));
    if (kSwim) {
      double m2t[3];
      mouth_to_target(m2t);
      w.copy(m2t, 3);
    }
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    const double upright = xmat(torso_, 8);
    if (!kSwim) return Tolerance{1, 1, 1}(upright);
    const double radii = m_->geom_size[3 * mouth_] + m_->geom_size[3 * target_];
    double m2t[3];
    mouth_to_target(m2t);
    const double in_target = Tolerance{0, radii, 2 * radii}(mujoco_envs::norm(m2t, 3));
    return (7 * in_target + 0.5 * (upright + 1)) / 8;
  }

 private:
  void mouth_to_target(double* out) const {
    const double* t = d_->geom_xpos + 3 * target_;
    const double* m = d_->geom_xpos + 3 * mouth_;
    const double v[3] = {t[0] - m[0], t[1] - m[1], t[2] - m[2]};
    in_frame(v, d_->geom_xmat + 9 * mouth_, out);
  }

  int root_, torso_, target_, mouth_;
  std::vector<int> joint_qpos_, joint_dof_;
};

template <int kMoveSpeed>
class Humanoid : public DmcEnv {
 public:
  static constexpr DmcTraits kTraits{
      kMoveSpeed == 0 ? "HumanoidStand-v1"
                      : (kMoveSpeed == 1 ? "HumanoidWalk-v1" : "HumanoidRun-v1"),
      "humanoid.xml", 25.0, 0.025, 0};
  // joint_angles, head_height, extremities 12, torso_vertical 3, com_velocity 3, velocity.
  static int64_t ObsSize(const mjModel* m) { return (m->nq - 7) + 1 + 12 + 3 + 3 + m->nv; }

  explicit Humanoid(const EnvOptions& o)
      : DmcEnv(kTraits, o),
        torso_(id_of(mjOBJ_BODY, "torso")),
        head_(id_of(mjOBJ_BODY, "head")),
        com_vel_(sensor_adr("torso_subtreelinvel")),
        limbs_{id_of(mjOBJ_BODY, "left_hand"), id_of(mjOBJ_BODY, "left_foot"),
               id_of(mjOBJ_BODY, "right_hand"), id_of(mjOBJ_BODY, "right_foot")} {}

 protected:
  // Random joints until the body touches nothing.
  void initialize_episode(Rng& rng) override {
    do {
      randomize_joints(rng);
      forward_without_actuation();
    } while (d_->ncon > 0);
  }
  void write_obs(double* obs) const override {
    ObsWriter w{obs};
    w.copy(d_->qpos + 7, m_->nq - 7);
    w.put(d_->xpos[3 * head_ + 2]);
    const double* torso_pos = d_->xpos + 3 * torso_;
    for (int limb : limbs_) {
      const double* p = d_->xpos + 3 * limb;
      const double v[3] = {p[0] - torso_pos[0], p[1] - torso_pos[1], p[2] - torso_pos[2]};
      double local[3];
      in_frame(v, d_->xmat + 9 * torso_, local);
      w.copy(local, 3);
    }
    w.put(xmat(torso_, 6));
    w.put(xmat(torso_, 7));
    w.put(xmat(torso_, 8));
    w.copy(d_->sensordata + com_vel_, 3);
    w.copy(d_->qvel, m_->nv);
  }
  double reward() const override {
    constexpr double kStandHeight = 1.4;
    const double standing = Tolerance{kStandHeight, kInf, kStandHeight / 4}(d_->xpos[3 * head_ + 2]);
    const double upright = Tolerance{0.9, kInf, 1.9, Sigmoid::kLinear, 0}(xmat(torso_, 8));
    const double stand_reward = standing * upright;
    const double small_control = (4 + small_control_mean()) / 5;
    const double* v = d_->sensordata + com_vel_;
    if (kMoveSpeed == 0) {
      const double dont_move = (Tolerance{0, 0, 2}(v[0]) + Tolerance{0, 0, 2}(v[1])) / 2;
      return small_control * stand_reward * dont_move;
    }
    const double speed = mujoco_envs::norm(v, 2);
    const double move = (5 * Tolerance{double(kMoveSpeed), kInf, double(kMoveSpeed),
                                       Sigmoid::kLinear, 0}(speed) + 1) / 6;
    return small_control * stand_reward * move;
  }

 private:
  int torso_, head_, com_vel_;
  int limbs_[4];
};

using FishUpright = Fish<false>;
using FishSwim = Fish<true>;
using HumanoidStand = Humanoid<0>;
using HumanoidWalk = Humanoid<1>;
using HumanoidRun = Humanoid<10>;

}  // namespace dmc
}  // namespace torchfrag
