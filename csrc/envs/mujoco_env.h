// Shared machinery of the MuJoCo tasks: model loading and caching, the base
// env (one mjData per env, stepping as Gymnasium's MujocoEnv does), and small
// numeric helpers that reproduce NumPy's summation order.
//
// Alignment with Gymnasium relies on running the very same MuJoCo library
// calls in the same order: reset is mj_resetData, set qpos/qvel, mj_forward
// (Gymnasium's set_state); a step copies the action into ctrl, calls mj_step
// frame_skip times, then mj_rnePostConstraint (which fills cfrc_ext, cacc and
// cfrc_int; MuJoCo skips them otherwise).  With the same library, the same
// model file and the state synced after reset, trajectories agree to the bit;
// reward terms agree to the last few ulps (NumPy's pairwise sums are
// reproduced; norms and einsum may round differently).
#pragma once

#include <mujoco/mujoco.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "../env.h"

#ifndef TORCHFRAG_MUJOCO_DEFAULT_ASSETS
#define TORCHFRAG_MUJOCO_DEFAULT_ASSETS ""
#endif

namespace torchfrag {
namespace mujoco_envs {

// ------------------------------------------------------------- ownership --
struct ModelDeleter {
  void operator()(mjModel* m) const { mj_deleteModel(m); }
};
struct DataDeleter {
  void operator()(mjData* d) const { mj_deleteData(d); }
};
// A model is read-only once loaded (mj_step takes `const mjModel*`), so the
// envs of a pool share one and each owns its mjData.
using ModelPtr = std::shared_ptr<const mjModel>;
using DataPtr = std::unique_ptr<mjData, DataDeleter>;

// ----------------------------------------------------------------- paths --
inline std::string assets_dir() {
  const char* env = std::getenv("TORCHFRAG_MUJOCO_ASSETS");
  if (env != nullptr && env[0] != '\0') return env;
  return TORCHFRAG_MUJOCO_DEFAULT_ASSETS;
}

// Gymnasium's expand_model_path: '/' and '.' paths as given, '~' expanded,
// anything else relative to the assets folder; the file must exist.
inline std::string expand_model_path(const std::string& xml_file) {
  if (xml_file.empty()) throw std::invalid_argument("xml_file must not be empty");
  std::string full;
  if (xml_file[0] == '.' || xml_file[0] == '/') {
    full = xml_file;
  } else if (xml_file[0] == '~') {
    const char* home = std::getenv("HOME");
    full = std::string(home ? home : "") + xml_file.substr(1);
  } else {
    const std::string dir = assets_dir();
    if (dir.empty()) {
      throw std::invalid_argument(
          "cannot resolve xml_file '" + xml_file +
          "': the folder of Gymnasium's MuJoCo assets is unknown (install gymnasium or set "
          "TORCHFRAG_MUJOCO_ASSETS, or pass an absolute path)");
    }
    full = dir + "/" + xml_file;
  }
  struct stat st;
  if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw std::invalid_argument("xml_file: MuJoCo model file '" + full + "' does not exist");
  }
  return full;
}

// --------------------------------------------------------------- loading --
// What a spec needs to know about a model, without keeping the model alive.
struct ModelInfo {
  int nq = 0, nv = 0, nu = 0, nbody = 0, ntendon = 0, nsite = 0;
  double timestep = 0.0;
  std::vector<double> ctrl_low, ctrl_high;  // rounded to float32, as Gymnasium's Box
  std::vector<std::string> body_names;
};

struct SpecDeleter {
  void operator()(mjSpec* s) const { mj_deleteSpec(s); }
};

// MuJoCo reports compile-time notes (Gymnasium's half_cheetah.xml uses the
// deprecated 'settotalmass') through its global log handler, whose default
// prints them and appends them to MUJOCO_LOG.TXT in the working directory --
// on every pool construction, in whatever folder the user runs from.  A
// library should not do that, so while a model is parsed and compiled a
// handler that drops warnings is installed (loads are serialised; a warning
// another thread raises in that short window is dropped as well; errors
// still print).  Parse and compile errors themselves become exceptions.
inline void quiet_log_handler(const mjLogMessage* msg) {
  if (msg->level >= mjLOG_ERROR) std::fprintf(stderr, "MuJoCo error: %s\n", msg->subject);
}

class QuietMujocoLog {
 public:
  QuietMujocoLog() : previous_(mju_setLogHandler(&quiet_log_handler)) {}
  ~QuietMujocoLog() { mju_setLogHandler(previous_); }
  QuietMujocoLog(const QuietMujocoLog&) = delete;
  QuietMujocoLog& operator=(const QuietMujocoLog&) = delete;

 private:
  mjfLogHandler previous_;
};

// Parse, then compile (what mj_loadXML does), with errors as exceptions.
inline std::unique_ptr<mjModel, ModelDeleter> load_model_file(const std::string& path) {
  static std::mutex load_mu;
  std::lock_guard<std::mutex> lock(load_mu);
  QuietMujocoLog quiet;
  char error[1024] = {0};
  std::unique_ptr<mjSpec, SpecDeleter> spec(
      mj_parseXML(path.c_str(), nullptr, error, sizeof(error)));
  if (!spec) {
    throw std::invalid_argument("xml_file: MuJoCo could not parse '" + path + "': " + error);
  }
  std::unique_ptr<mjModel, ModelDeleter> m(mj_compile(spec.get(), nullptr));
  if (!m) {
    const char* why = mjs_getError(spec.get());
    throw std::invalid_argument("xml_file: MuJoCo could not load '" + path +
                                "': " + (why ? why : ""));
  }
  return m;
}

// Models are cached by path and file identity (mtime, size): one parse per
// pool however many envs it has.  The model cache holds weak references, so
// a model lives exactly as long as some env uses it; the info cache is plain
// data and stays, which keeps repeated spec queries cheap.
class ModelCache {
 public:
  static ModelCache& instance() {
    static ModelCache c;
    return c;
  }

  ModelPtr model(const std::string& path) {
    const std::string key = file_key(path);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(key);
    if (it != models_.end()) {
      if (ModelPtr m = it->second.lock()) return m;
    }
    ModelPtr m(load_model_file(path));  // shared_ptr keeps the deleter
    models_[key] = m;
    return m;
  }

  ModelInfo info(const std::string& path) {
    const std::string key = file_key(path);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = infos_.find(key);
      if (it != infos_.end()) return it->second;
    }
    ModelPtr m = model(path);
    ModelInfo info;
    info.nq = m->nq;
    info.nv = m->nv;
    info.nu = m->nu;
    info.nbody = m->nbody;
    info.ntendon = m->ntendon;
    info.nsite = m->nsite;
    info.timestep = m->opt.timestep;
    for (int k = 0; k < m->nu; ++k) {
      info.ctrl_low.push_back(static_cast<float>(m->actuator_ctrlrange[2 * k]));
      info.ctrl_high.push_back(static_cast<float>(m->actuator_ctrlrange[2 * k + 1]));
    }
    for (int b = 0; b < m->nbody; ++b) {
      const char* name = mj_id2name(m.get(), mjOBJ_BODY, b);
      info.body_names.emplace_back(name ? name : "");
    }
    std::lock_guard<std::mutex> lock(mu_);
    infos_[key] = info;
    return info;
  }

 private:
  // The canonical path (relative paths depend on the working directory) plus
  // the file's mtime and size, so an edited file is loaded again.
  static std::string file_key(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      throw std::invalid_argument("xml_file: MuJoCo model file '" + path + "' does not exist");
    }
    std::string canonical = path;
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      canonical = real;
      std::free(real);  // realpath's result is malloc'ed by libc
    }
    return canonical + "|" + std::to_string(static_cast<long long>(st.st_mtime)) + "|" +
           std::to_string(static_cast<long long>(st.st_size));
  }

  std::mutex mu_;
  std::map<std::string, std::weak_ptr<const mjModel>> models_;
  std::map<std::string, ModelInfo> infos_;
};

// ------------------------------------------------------------ numeric ----
// NumPy's float64 sum (pairwise, eight accumulators): reward terms computed
// with np.sum round exactly like this.
inline double np_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return np_sum(a, n2) + np_sum(a + n2, n - n2);
}

// np.sum(np.square(x)) for up to 512 values (larger inputs fall back to a
// plain loop; no task comes close).
inline double np_sum_sq(const double* x, int64_t n, double lo = -kInf, double hi = kInf) {
  double tmp[512];
  if (n > 512) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = std::min(std::max(x[i], lo), hi);
      s += v * v;
    }
    return s;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::min(std::max(x[i], lo), hi);  // np.clip (NaN passes through)
    tmp[i] = v * v;
  }
  return np_sum(tmp, n);
}

inline double clip(double v, double lo, double hi) { return std::min(std::max(v, lo), hi); }

// np.linalg.norm of a short vector: sqrt(x . x).
inline double norm(const double* x, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  return std::sqrt(s);
}

// Sequential writer into an observation row.
struct ObsWriter {
  double* p;
  void put(double v) { *p++ = v; }
  void copy(const double* src, int n) {
    std::memcpy(p, src, sizeof(double) * static_cast<size_t>(n));
    p += n;
  }
  void copy_clipped(const double* src, int n, double lo, double hi) {
    for (int i = 0; i < n; ++i) *p++ = clip(src[i], lo, hi);
  }
};

// ----------------------------------------------------------- spec bits ---
inline ArraySpec f64_array(std::string name, std::vector<int64_t> shape) {
  ArraySpec s;
  s.name = std::move(name);
  s.dtype = DType::kFloat64;
  s.shape = std::move(shape);
  return s;
}
inline ArraySpec f64_scalar(std::string name) { return f64_array(std::move(name), {}); }

// Index of the first task-specific info; 0 and 1 are qpos0 and qvel0.
constexpr size_t kTaskInfo = 2;

// ----------------------------------------------------------- task traits --
// A task's Gymnasium registry entry: what the family needs before any env.
struct TaskTraits {
  const char* id;
  const char* xml;
  int frame_skip;
  int64_t max_episode_steps;
  double reward_threshold;
};

// ----------------------------------------------------------- reset noise --
// Every v5 task's reset_model has the same shape:
//   qpos = init_qpos + qpos noise;   a task may then place targets in qpos;
//   qvel = init_qvel + qvel noise;   the last `still_tail` entries set to 0.
// A task only says which noise and how large (and Pusher/Reacher place their
// targets), so the body lives once in MujocoEnv::reset_model.  The draws come
// from the env's Rng in Gymnasium's order: qpos elements, the targets', qvel
// elements; uniform noise is `init + (lo + (hi - lo) * u)` and normal noise
// `init + scale * n`, which is how NumPy's expressions round.
enum class Noise {
  kNone,     // init
  kUniform,  // init + U(-scale, scale) per element
  kNormal,   // init + scale * N(0, 1) per element
};

struct ResetNoise {
  Noise qpos = Noise::kUniform;
  double qpos_scale = 0.0;
  Noise qvel = Noise::kUniform;
  double qvel_scale = 0.0;
  int still_tail = 0;  // qvel entries of the targets, which start at rest
};

// The common case: uniform qpos noise and `qvel` noise, both of the task's
// reset_noise_scale option.
inline ResetNoise scaled_noise(const EnvOptions& o, Noise qvel) {
  const double s = o.f("reset_noise_scale");
  return ResetNoise{Noise::kUniform, s, qvel, s, 0};
}

// -------------------------------------------------------------- base env --
// One env: a shared model, its own mjData.  The reset (Gymnasium's
// reset_model and set_state) is shared; a task writes its observation, steps,
// and sets its info values (see MujocoTask).
class MujocoEnv : public Env {
 public:
  MujocoEnv(const EnvOptions& o, const ResetNoise& noise)
      : model_(ModelCache::instance().model(expand_model_path(o.s("xml_file")))),
        m_(model_.get()),
        data_(mj_makeData(m_)),
        frame_skip_(static_cast<int>(o.i("frame_skip"))),
        noise_(noise) {
    if (!data_) throw std::runtime_error("mj_makeData failed (out of memory?)");
    d_ = data_.get();
    if (frame_skip_ < 1) throw std::invalid_argument("frame_skip must be >= 1");
    // Gymnasium's dt is a Python float product: the same double here.
    dt_ = m_->opt.timestep * static_cast<double>(frame_skip_);
    // Gymnasium's init_qpos/init_qvel: the state of a fresh MjData.
    init_qpos_.assign(d_->qpos, d_->qpos + m_->nq);
    init_qvel_.assign(d_->qvel, d_->qvel + m_->nv);
    qpos0_.assign(m_->nq, 0.0);
    qvel0_.assign(m_->nv, 0.0);
  }

  void reset(Rng& rng, const Row& out) final {
    mj_resetData(m_, d_);
    reset_model(rng);  // writes d_->qpos and d_->qvel
    // set_state: Gymnasium also clears act when na == 0 (a no-op), then forwards.
    mj_forward(m_, d_);
    std::memcpy(qpos0_.data(), d_->qpos, sizeof(double) * m_->nq);
    std::memcpy(qvel0_.data(), d_->qvel, sizeof(double) * m_->nv);
    write_start(out);
    write_obs(out.obs<double>());
    reset_infos();
    write_infos(out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) final {
    write_start(out);
    const StepResult r = step_task(a.values, out.obs<double>());
    write_infos(out);
    return r;
  }

  // qpos then qvel: a renderer with the same model redraws the scene from
  // them (torchfrag/envs/rendering.py).
  bool render(RenderData* out) override {
    out->state.assign(d_->qpos, d_->qpos + m_->nq);
    out->state.insert(out->state.end(), d_->qvel, d_->qvel + m_->nv);
    return true;
  }

 protected:
  // Hook of reset_model between the qpos and the qvel noise: tasks with a
  // target (Pusher's object, Reacher's goal) draw and write its position.
  virtual void place_targets(Rng&) {}
  virtual void write_obs(double* obs) const {
    ObsWriter w{obs};
    write_state(w);
  }
  // One env step: simulate, write the observation, set the info values.
  virtual StepResult step_task(const double* action, double* obs) = 0;
  // Info values of a reset (Gymnasium's reset info, zeros for step-only
  // entries) and their copy into the row; see MujocoTask.
  virtual void reset_infos() = 0;
  virtual void write_infos(const Row& out) const = 0;

  // MujocoEnv.do_simulation: ctrl <- action (MuJoCo clamps it internally
  // where the actuator is ctrllimited; ctrl itself keeps the raw values),
  // frame_skip mj_steps, then the post-constraint quantities.
  //
  // mj_rnePostConstraint only fills cacc, cfrc_int and cfrc_ext, which no
  // later mj_step reads; tasks whose observation and reward never look at
  // them (everything but Ant and the humanoids) skip it and save its cost.
  // Their results are the same bit for bit.
  void do_simulation(const double* action) {
    std::memcpy(d_->ctrl, action, sizeof(double) * m_->nu);
    for (int k = 0; k < frame_skip_; ++k) mj_step(m_, d_);
    if (uses_post_constraint_) mj_rnePostConstraint(m_, d_);
  }
  // Tasks that read cacc/cfrc_int/cfrc_ext set this in their constructor.
  bool uses_post_constraint_ = false;

  // (after - before) / dt: the velocity Gymnasium's tasks reward.
  double velocity(double before, double after) const { return (after - before) / dt_; }

  // The usual observation head: qpos without its first obs_skip_ entries
  // (the root's x, or x and y, that a task may leave out), then qvel, clipped
  // to [-obs_vel_clip_, obs_vel_clip_] where a task clips it.  It is the whole
  // observation of the tasks that do not override write_obs.
  void write_state(ObsWriter& w) const {
    w.copy(d_->qpos + obs_skip_, m_->nq - obs_skip_);
    if (obs_vel_clip_ == kInf) {
      w.copy(d_->qvel, m_->nv);
    } else {
      w.copy_clipped(d_->qvel, m_->nv, -obs_vel_clip_, obs_vel_clip_);
    }
  }
  int obs_skip_ = 0;
  double obs_vel_clip_ = kInf;

  int body_id(const char* name) const {
    const int id = mj_name2id(m_, mjOBJ_BODY, name);
    if (id < 0) {
      throw std::invalid_argument(std::string("the MuJoCo model has no body named '") + name +
                                  "', which this task needs");
    }
    return id;
  }

  ModelPtr model_;
  const mjModel* m_;
  DataPtr data_;
  mjData* d_ = nullptr;
  int frame_skip_;
  double dt_ = 0.0;
  std::vector<double> init_qpos_, init_qvel_;
  std::vector<double> qpos0_, qvel0_;

 private:
  // Gymnasium's reset_model, the same for every task (see ResetNoise).
  void reset_model(Rng& rng) {
    add_noise(d_->qpos, init_qpos_, noise_.qpos, noise_.qpos_scale, rng);
    place_targets(rng);
    add_noise(d_->qvel, init_qvel_, noise_.qvel, noise_.qvel_scale, rng);
    const int nv = m_->nv;
    for (int k = std::max(0, nv - noise_.still_tail); k < nv; ++k) d_->qvel[k] = 0.0;
  }

  static void add_noise(double* dst, const std::vector<double>& init, Noise kind, double scale,
                        Rng& rng) {
    const size_t n = init.size();
    switch (kind) {
      case Noise::kNone:
        std::copy(init.begin(), init.end(), dst);
        break;
      case Noise::kUniform:
        for (size_t k = 0; k < n; ++k) dst[k] = init[k] + rng.uniform(-scale, scale);
        break;
      case Noise::kNormal:
        for (size_t k = 0; k < n; ++k) dst[k] = init[k] + scale * rng.normal();
        break;
    }
  }

  void write_start(const Row& out) const {
    std::memcpy(out.info<double>(0), qpos0_.data(), sizeof(double) * m_->nq);
    std::memcpy(out.info<double>(1), qvel0_.data(), sizeof(double) * m_->nv);
  }

  ResetNoise noise_;
};

// ------------------------------------------------------------- task infos --
// One entry of a task's info dict: its name and where its value lives, a
// double the task sets (`value`) or an mjData array with one entry per
// tendon (`per_tendon`).  A task lists its entries once, in Gymnasium's
// order, in `static const auto& info_fields()`; the spec's info arrays, the
// reset zeros and the copy into the batch row all derive from that list, so
// there are no slot indices to keep in step with the names.
template <typename Task>
struct InfoField {
  const char* name;
  double Task::*value = nullptr;
  double* mjData::*per_tendon = nullptr;
};

// The base of every task class: MujocoEnv plus the info plumbing driven by
// Task::info_fields().
template <typename Task>
class MujocoTask : public MujocoEnv {
 public:
  using MujocoEnv::MujocoEnv;
  using Field = InfoField<Task>;

  // The task's info arrays, after qpos0/qvel0.
  static std::vector<ArraySpec> Infos(const ModelInfo& i) {
    std::vector<ArraySpec> v;
    for (const Field& f : Task::info_fields()) {
      v.push_back(f.value != nullptr ? f64_scalar(f.name) : f64_array(f.name, {i.ntendon}));
    }
    return v;
  }

 protected:
  static constexpr Field scalar(const char* name, double Task::*value) {
    return Field{name, value, nullptr};
  }
  static constexpr Field per_tendon(const char* name, double* mjData::*array) {
    return Field{name, nullptr, array};
  }
  // Sets the values of Gymnasium's reset info; the others stay zero.
  virtual void set_reset_info() {}

 private:
  void reset_infos() final {
    Task& self = static_cast<Task&>(*this);
    for (const Field& f : Task::info_fields()) {
      if (f.value != nullptr) self.*f.value = 0.0;
    }
    set_reset_info();
  }
  void write_infos(const Row& out) const final {
    const Task& self = static_cast<const Task&>(*this);
    size_t k = kTaskInfo;
    for (const Field& f : Task::info_fields()) {
      double* dst = out.info<double>(k++);
      if (f.value != nullptr) {
        *dst = self.*f.value;
      } else {
        std::memcpy(dst, d_->*f.per_tendon, sizeof(double) * m_->ntendon);
      }
    }
  }
};

}  // namespace mujoco_envs
}  // namespace torchfrag
