// Shared machinery of the DeepMind Control Suite tasks: where the suite's
// models are, dm_control's reward shaping (rewards.tolerance), and the base
// env that resets and steps exactly as dm_control's control.Environment on a
// mujoco.Physics does.
//
// dm_control's sequence, reproduced call for call so that trajectories agree
// with the reference on the same MuJoCo build:
// * reset: mj_resetData, mj_forward with actuation disabled (Physics.reset),
//   the task's initialize_episode, mj_forward with actuation disabled again
//   (Physics.after_reset).
// * step: ctrl <- action (no clipping: MuJoCo clamps ctrllimited actuators
//   internally), then the "legacy step": mj_step2 (mj_step1 already ran for
//   this state), n_sub_steps - 1 mj_step, then mj_step1 so that positions and
//   velocities derived fields match qpos/qvel when the observation is read.
//   RK4 models (cartpole, acrobot) use n_sub_steps mj_step then mj_step1.
#pragma once

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../env.h"
#include "mujoco_env.h"

namespace torchfrag {
namespace dmc {

using mujoco_envs::DataPtr;
using mujoco_envs::f64_array;
using mujoco_envs::ModelCache;
using mujoco_envs::ModelDeleter;
using mujoco_envs::ModelPtr;

// ----------------------------------------------------------------- paths --
// The suite folder (dm_control/suite): TORCHFRAG_DMC_ASSETS, set by
// torchfrag/_preload/mujoco.py from the installed dm_control without
// importing it (dm_control itself needs another MuJoCo than the pool's).
inline std::string suite_dir() {
  const char* env = std::getenv("TORCHFRAG_DMC_ASSETS");
  if (env == nullptr || env[0] == '\0') {
    throw std::invalid_argument(
        "the DeepMind Control Suite envs read their models from the dm_control package, which "
        "is not installed: run `pip install torchfrag[dmc]` (dm-control==1.0.50), or set "
        "TORCHFRAG_DMC_ASSETS to a folder holding the suite's XML files");
  }
  return env;
}

// A suite file, or one of the models dm_control generates from a template
// (the swimmers), which torchfrag/_dmc_models.py writes into
// TORCHFRAG_DMC_GENERATED.
inline std::string suite_model_path(const std::string& xml) {
  struct stat st;
  const auto is_file = [&st](const std::string& p) {
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  const std::string path = suite_dir() + "/" + xml;
  if (is_file(path)) return path;
  const char* generated = std::getenv("TORCHFRAG_DMC_GENERATED");
  if (generated != nullptr && generated[0] != '\0') {
    const std::string alt = std::string(generated) + "/" + xml;
    if (is_file(alt)) return alt;
  }
  throw std::invalid_argument("DeepMind Control Suite model '" + path +
                              "' does not exist (TORCHFRAG_DMC_ASSETS must name dm_control's "
                              "suite folder; generated models are read from "
                              "TORCHFRAG_DMC_GENERATED)");
}

// ------------------------------------------------------ rewards.tolerance --
// dm_control.utils.rewards: 1 inside [lower, upper], a sigmoid of the
// distance to the nearest bound (in units of margin) outside; with
// margin == 0 it is an indicator.  Same expressions as NumPy evaluates them.
enum class Sigmoid { kGaussian, kLinear, kQuadratic, kHyperbolic, kLongTail, kReciprocal,
                     kCosine, kTanhSquared };

inline double sigmoid_value(double x, double value_at_1, Sigmoid kind) {
  switch (kind) {
    case Sigmoid::kGaussian: {
      const double scale = std::sqrt(-2 * std::log(value_at_1));
      const double xs = x * scale;
      return std::exp(-0.5 * (xs * xs));
    }
    case Sigmoid::kHyperbolic:
      return 1 / std::cosh(x * std::acosh(1 / value_at_1));
    case Sigmoid::kLongTail: {
      const double xs = x * std::sqrt(1 / value_at_1 - 1);
      return 1 / (xs * xs + 1);
    }
    case Sigmoid::kReciprocal:
      return 1 / (std::abs(x) * (1 / value_at_1 - 1) + 1);
    case Sigmoid::kCosine: {
      const double xs = x * (std::acos(2 * value_at_1 - 1) / M_PI);
      return std::abs(xs) < 1 ? (1 + std::cos(M_PI * xs)) / 2 : 0.0;
    }
    case Sigmoid::kLinear: {
      const double xs = x * (1 - value_at_1);
      return std::abs(xs) < 1 ? 1 - xs : 0.0;
    }
    case Sigmoid::kQuadratic: {
      const double xs = x * std::sqrt(1 - value_at_1);
      return std::abs(xs) < 1 ? 1 - xs * xs : 0.0;
    }
    case Sigmoid::kTanhSquared: {
      const double t = std::tanh(x * std::atanh(std::sqrt(1 - value_at_1)));
      return 1 - t * t;
    }
  }
  return 0.0;
}

struct Tolerance {
  double lower = 0.0;
  double upper = 0.0;
  double margin = 0.0;
  Sigmoid sigmoid = Sigmoid::kGaussian;
  double value_at_margin = 0.1;

  double operator()(double x) const {
    const bool in_bounds = lower <= x && x <= upper;
    if (margin == 0) return in_bounds ? 1.0 : 0.0;
    if (in_bounds) return 1.0;
    const double d = (x < lower ? lower - x : x - upper) / margin;
    return sigmoid_value(d, value_at_margin, sigmoid);
  }
};

// ------------------------------------------------------------ task traits --
struct DmcTraits {
  const char* id;
  const char* xml;            // file in the suite folder
  double time_limit;          // seconds (the suite's _DEFAULT_TIME_LIMIT)
  double control_timestep;    // 0: the model's timestep (one physics step per env step)
  int target_size;            // length of the `target0` info (0: none)
};

// dm_control's compute_n_steps: control_timestep must be a whole multiple.
inline int n_sub_steps(const DmcTraits& t, double physics_timestep) {
  if (t.control_timestep == 0) return 1;
  const double ratio = t.control_timestep / physics_timestep;
  if (std::abs(ratio - std::round(ratio)) > 1e-8) {
    throw std::invalid_argument(std::string(t.id) + ": control timestep is not a multiple of "
                                "the model's timestep");
  }
  return static_cast<int>(std::round(ratio));
}

// control.Environment ends an episode once step_count >= time_limit /
// (timestep * n_sub_steps), a float comparison: the first whole step count
// at or past that quotient.
inline int64_t step_limit(const DmcTraits& t, double physics_timestep) {
  const double limit = t.time_limit / (physics_timestep * n_sub_steps(t, physics_timestep));
  return static_cast<int64_t>(std::ceil(limit));
}

// ---------------------------------------------------------------- base env --
// One env: its own copy of the model (tasks write targets and sizes into it
// at reset, as dm_control does) and its own mjData.
class DmcEnv : public Env {
 public:
  DmcEnv(const DmcTraits& traits, const EnvOptions&)
      : shared_(ModelCache::instance().model(suite_model_path(traits.xml))),
        own_(mj_copyModel(nullptr, shared_.get())),
        target_size_(traits.target_size) {
    if (!own_) throw std::runtime_error("mj_copyModel failed (out of memory?)");
    m_ = own_.get();
    data_.reset(mj_makeData(m_));
    if (!data_) throw std::runtime_error("mj_makeData failed (out of memory?)");
    d_ = data_.get();
    n_sub_steps_ = n_sub_steps(traits, m_->opt.timestep);
    control_terms_.assign(m_->nu, 0.0);
    qpos0_.assign(m_->nq, 0.0);
    qvel0_.assign(m_->nv, 0.0);
    target0_.assign(target_size_, 0.0);
  }

  void reset(Rng& rng, const Row& out) final {
    mj_resetData(m_, d_);
    forward_without_actuation();
    initialize_episode(rng);
    forward_without_actuation();
    std::memcpy(qpos0_.data(), d_->qpos, sizeof(double) * m_->nq);
    std::memcpy(qvel0_.data(), d_->qvel, sizeof(double) * m_->nv);
    write_infos(out);
    write_obs(out.obs<double>());
  }

  StepResult step(const Action& a, Rng&, const Row& out) final {
    std::memcpy(d_->ctrl, a.values, sizeof(double) * m_->nu);
    physics_step(n_sub_steps_);
    StepResult r;
    r.reward = reward();
    write_obs(out.obs<double>());
    r.terminated = terminated();
    write_infos(out);
    return r;
  }

  // What torchfrag/envs/rendering.py redraws the scene from with the suite's
  // model: qpos, qvel, then the model fields tasks write at reset (targets,
  // their sizes, the swimmer's target light), whole, in this order.  Sending
  // them whole keeps the renderer free of per-task knowledge.
  bool render(RenderData* out) override {
    auto& s = out->state;
    s.assign(d_->qpos, d_->qpos + m_->nq);
    s.insert(s.end(), d_->qvel, d_->qvel + m_->nv);
    s.insert(s.end(), m_->body_pos, m_->body_pos + 3 * m_->nbody);
    s.insert(s.end(), m_->body_quat, m_->body_quat + 4 * m_->nbody);
    s.insert(s.end(), m_->geom_pos, m_->geom_pos + 3 * m_->ngeom);
    s.insert(s.end(), m_->geom_size, m_->geom_size + 3 * m_->ngeom);
    s.insert(s.end(), m_->site_pos, m_->site_pos + 3 * m_->nsite);
    s.insert(s.end(), m_->site_size, m_->site_size + 3 * m_->nsite);
    s.insert(s.end(), m_->light_pos, m_->light_pos + 3 * m_->nlight);
    return true;
  }

 protected:
  // The task's initialize_episode: writes qpos/qvel (and model targets).
  virtual void initialize_episode(Rng& rng) = 0;
  virtual void write_obs(double* obs) const = 0;
  virtual double reward() const = 0;
  // get_termination: a discount of 0 ends the episode (no suite task here
  // terminates early, so the default says never).
  virtual bool terminated() const { return false; }
  // The model values the task randomised at reset (`target0`).
  virtual void write_target(double*) const {}

  // Physics.step(nstep), legacy_step=True.
  void physics_step(int nstep) {
    if (m_->opt.integrator != mjINT_RK4) {
      mj_step2(m_, d_);
      for (int k = 1; k < nstep; ++k) mj_step(m_, d_);
    } else {
      for (int k = 0; k < nstep; ++k) mj_step(m_, d_);
    }
    mj_step1(m_, d_);
  }

  void forward_without_actuation() {
    const int flags = m_->opt.disableflags;
    m_->opt.disableflags = flags | mjDSBL_ACTUATION;
    mj_forward(m_, d_);
    m_->opt.disableflags = flags;
  }

  // randomizers.randomize_limited_and_rotational_joints, in joint order.
  void randomize_joints(Rng& rng) {
    for (int j = 0; j < m_->njnt; ++j) {
      const int adr = m_->jnt_qposadr[j];
      const int type = m_->jnt_type[j];
      const double lo = m_->jnt_range[2 * j], hi = m_->jnt_range[2 * j + 1];
      if (m_->jnt_limited[j]) {
        if (type == mjJNT_HINGE || type == mjJNT_SLIDE) {
          d_->qpos[adr] = rng.uniform(lo, hi);
        } else if (type == mjJNT_BALL) {
          throw std::logic_error("limited ball joints are not randomised by this port");
        }
      } else if (type == mjJNT_HINGE) {
        d_->qpos[adr] = rng.uniform(-M_PI, M_PI);
      } else if (type == mjJNT_BALL) {
        double q[4];
        for (double& v : q) v = rng.normal();
        normalize4(q, d_->qpos + adr);
      } else if (type == mjJNT_FREE) {
        double q[4];  // dm_control draws rand(4) here, not randn (kept for its benchmarks)
        for (double& v : q) v = rng.uniform();
        normalize4(q, d_->qpos + adr + 3);
      }
    }
  }

  // rewards.tolerance(physics.control(), margin=1, value_at_margin=0,
  // sigmoid='quadratic').mean(): NumPy's pairwise sum over the actuators.
  double small_control_mean() const {
    const Tolerance small{0, 0, 1, Sigmoid::kQuadratic, 0};
    for (int k = 0; k < m_->nu; ++k) control_terms_[k] = small(d_->ctrl[k]);
    return mujoco_envs::np_sum(control_terms_.data(), m_->nu) / m_->nu;
  }

  int id_of(mjtObj type, const char* name) const {
    const int id = mj_name2id(m_, type, name);
    if (id < 0) {
      throw std::invalid_argument(std::string("the suite model has no object named '") + name +
                                  "', which this task needs");
    }
    return id;
  }
  int sensor_adr(const char* name) const { return m_->sensor_adr[id_of(mjOBJ_SENSOR, name)]; }
  // Rotation matrix entry of a body: 0 = xx, 2 = xz, 8 = zz (row-major).
  double xmat(int body, int entry) const { return d_->xmat[9 * body + entry]; }

  ModelPtr shared_;  // keeps the cache entry (and spec queries) cheap
  std::unique_ptr<mjModel, ModelDeleter> own_;
  mjModel* m_ = nullptr;
  DataPtr data_;
  mjData* d_ = nullptr;
  int n_sub_steps_ = 1;

 private:
  static void normalize4(const double* q, double* dst) {
    const double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    for (int k = 0; k < 4; ++k) dst[k] = q[k] / n;
  }

  void write_infos(const Row& out) const {
    std::memcpy(out.info<double>(0), qpos0_.data(), sizeof(double) * m_->nq);
    std::memcpy(out.info<double>(1), qvel0_.data(), sizeof(double) * m_->nv);
    if (target_size_ > 0) write_target(out.info<double>(2));
  }

  int target_size_;
  std::vector<double> qpos0_, qvel0_, target0_;
  mutable std::vector<double> control_terms_;  // scratch of small_control_mean
};

// Sequential writer into an observation row.
using mujoco_envs::ObsWriter;

}  // namespace dmc
}  // namespace torchfrag
