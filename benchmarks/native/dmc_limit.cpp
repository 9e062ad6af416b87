// The physics limit of a DeepMind Control Suite task: the physics work its
// env steps must do, run in a plain C++ loop with no pool around it (no
// queues, batches, Python caller or action checks).
//
// The envs are the pool's own task classes (csrc/envs/dmc/), so the physics
// sees the same models and the same states: each env is reset by its task
// (dm_control's initialize_episode: random joints, CheetahRun's 200 settling
// steps, ...) and again after the suite's 1000 steps, as in the pool.  Per env
// step, one of:
//   sequence  ctrl <- action, then the MuJoCo calls of dm_control's
//             Physics.step (mj_step2, n_sub_steps - 1 mj_step, mj_step1; RK4
//             models n_sub_steps mj_step then mj_step1): what an env step must
//             do before it can read an observation.  The limit.
//   mj_step   ctrl <- action, n_sub_steps bare mj_step (skips the mj_step1 a
//             dm_control step ends with): MuJoCo alone, for comparison.
//   env       the whole env step (sequence, reward, observation, infos): the
//             pool's per-env work without the pool.
// `threads` threads each own a contiguous chunk of `num_envs` envs and sweep
// it with random controls inside the actuators' ranges: perfect
// parallelism, no hand-off, the most env steps/s any pool could reach.
//
// Built by benchmarks/catalog.py with the extension's flags against the
// mujoco wheel it links.  Usage:
//   dmc_limit <env id> <num_envs> <threads> <seconds> <sequence|mj_step|env> [cycle]
// cycle > 0: each thread draws the controls of `cycle` sweeps once and
// replays them, as the catalogue's pools replay their action batches (a
// periodic forcing: CartpoleSwingup's cart meets its rails more often, ~6%
// more physics per step than fresh controls); 0 or absent: fresh controls.
// prints "<env steps per second> <CPU microseconds per env step>" (CPU time
// of the stepping threads, summed, over the steps they made).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "envs/dmc.h"
#include "envs/dmc/cartpole.h"
#include "envs/dmc/cheetah_walker.h"
#include "envs/dmc/fish_humanoid.h"
#include "envs/dmc/hopper_finger_cup.h"
#include "limit_window.h"

using torchfrag::Action;
using torchfrag::EnvSpec;
using torchfrag::Rng;
using torchfrag::Row;

namespace {

enum class Mode { kSequence, kMjStep, kEnv };

constexpr int kWarmupSweeps = 20;  // steps per env before the clock starts

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A task whose physics can be stepped without its reward and observation.
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual torchfrag::Env& env() = 0;
  virtual void physics(const double* ctrl, Mode mode) = 0;
  virtual int nu() const = 0;
  virtual const double* ctrlrange() const = 0;
};

template <typename Task>
class Probe final : public Task, public Stepper {
 public:
  explicit Probe(const torchfrag::EnvOptions& o) : Task(o) {}
  torchfrag::Env& env() override { return *this; }
  void physics(const double* ctrl, Mode mode) override {
    std::memcpy(this->d_->ctrl, ctrl, sizeof(double) * this->m_->nu);
    if (mode == Mode::kSequence) {
      this->physics_step(this->n_sub_steps_);
    } else {
      for (int k = 0; k < this->n_sub_steps_; ++k) mj_step(this->m_, this->d_);
    }
  }
  int nu() const override { return this->m_->nu; }
  const double* ctrlrange() const override { return this->m_->actuator_ctrlrange; }
};

std::unique_ptr<Stepper> make_task(const std::string& id, const torchfrag::EnvOptions& o) {
  namespace d = torchfrag::dmc;
  if (id == "CartpoleSwingup-v1") return std::make_unique<Probe<d::CartpoleSwingup>>(o);
  if (id == "CheetahRun-v1") return std::make_unique<Probe<d::CheetahRun>>(o);
  if (id == "FingerSpin-v1") return std::make_unique<Probe<d::FingerSpin>>(o);
  if (id == "WalkerWalk-v1") return std::make_unique<Probe<d::WalkerWalk>>(o);
  if (id == "HumanoidRun-v1") return std::make_unique<Probe<d::HumanoidRun>>(o);
  throw std::invalid_argument("dmc_limit knows CartpoleSwingup-v1, CheetahRun-v1, "
                              "FingerSpin-v1, WalkerWalk-v1 and HumanoidRun-v1, not '" + id + "'");
}

// One thread's envs with their output rows (observation and infos).
struct Chunk {
  std::vector<std::unique_ptr<Stepper>> envs;
  std::vector<Rng> rngs;
  std::vector<int64_t> length;
  std::vector<std::vector<uint8_t>> fields;  // obs, then each info: one row per env
  std::vector<uint8_t*> info_bases;
  std::vector<size_t> info_bytes;
  size_t obs_bytes = 0;

  Row row(size_t k) {
    return Row(fields[0].data() + obs_bytes * k, info_bases.data(), info_bytes.data(),
               static_cast<int64_t>(k));
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr,
                 "usage: %s <env id> <num_envs> <threads> <seconds> <sequence|mj_step|env> "
                 "[cycle]\n",
                 argv[0]);
    return 2;
  }
  const long long cycle = argc == 7 ? std::atoll(argv[6]) : 0;
  const std::string id = argv[1];
  const int num_envs = std::atoi(argv[2]);
  const int threads = std::atoi(argv[3]);
  const double seconds = std::atof(argv[4]);
  const std::string mode_name = argv[5];
  Mode mode;
  if (mode_name == "sequence") {
    mode = Mode::kSequence;
  } else if (mode_name == "mj_step") {
    mode = Mode::kMjStep;
  } else if (mode_name == "env") {
    mode = Mode::kEnv;
  } else {
    std::fprintf(stderr, "mode must be sequence, mj_step or env, got '%s'\n", mode_name.c_str());
    return 2;
  }
  if (num_envs < 1 || threads < 1 || threads > num_envs || !(seconds > 0)) {
    std::fprintf(stderr, "need 1 <= threads <= num_envs and seconds > 0\n");
    return 2;
  }
  torchfrag::dmc::DmcFamily family;
  EnvSpec spec;
  try {
    spec = family.spec(id, nullptr);
    make_task(id, torchfrag::EnvOptions(torchfrag::Options::resolve({}, {}, 1), 0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const torchfrag::Options options = torchfrag::Options::resolve({}, {}, num_envs);

  limit::Window window;
  std::vector<long long> steps(threads, 0);
  std::vector<double> cpu(threads, 0.0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int begin = num_envs * t / threads, end = num_envs * (t + 1) / threads;
      const size_t count = static_cast<size_t>(end - begin);
      Chunk c;
      c.obs_bytes = spec.obs.nbytes();
      c.fields.emplace_back(c.obs_bytes * count);
      for (const auto& info : spec.infos) {
        c.fields.emplace_back(info.nbytes() * count);
        c.info_bytes.push_back(info.nbytes());
      }
      for (size_t k = 1; k < c.fields.size(); ++k) c.info_bases.push_back(c.fields[k].data());
      for (int i = begin; i < end; ++i) {
        c.envs.push_back(make_task(id, torchfrag::EnvOptions(options, i)));
        c.rngs.emplace_back(torchfrag::env_seed(0, i));
        c.length.push_back(0);
      }
      for (size_t k = 0; k < count; ++k) c.envs[k]->env().reset(c.rngs[k], c.row(k));
      Rng controls(12345 + t);
      const size_t nu = static_cast<size_t>(c.envs[0]->nu());
      std::vector<double> ctrl(nu);
      // cycle > 0: the controls of `cycle` sweeps drawn once and replayed,
      // as the catalogue's pools get them (a fixed set of action batches).
      std::vector<double> table;
      if (cycle > 0) {
        table.resize(static_cast<size_t>(cycle) * count * nu);
        for (size_t i = 0; i < table.size(); ++i) {
          const double* range = c.envs[(i / nu) % count]->ctrlrange();
          const size_t a = i % nu;
          table[i] = controls.uniform(range[2 * a], range[2 * a + 1]);
        }
      }
      long long sweeps = 0;
      auto sweep = [&] {
        const double* row = cycle > 0 ? table.data() + (sweeps % cycle) * count * nu : nullptr;
        ++sweeps;
        for (size_t k = 0; k < count; ++k) {
          Stepper& e = *c.envs[k];
          const double* range = e.ctrlrange();
          for (size_t a = 0; a < ctrl.size(); ++a) {
            ctrl[a] = row ? row[k * nu + a] : controls.uniform(range[2 * a], range[2 * a + 1]);
          }
          if (mode == Mode::kEnv) {
            Action act;
            act.values = ctrl.data();
            e.env().step(act, c.rngs[k], c.row(k));
          } else {
            e.physics(ctrl.data(), mode);
          }
          // The pool's time limit and auto-reset, so the states look the same.
          if (++c.length[k] >= spec.max_episode_steps) {
            e.env().reset(c.rngs[k], c.row(k));
            c.length[k] = 0;
          }
        }
      };
      for (int w = 0; w < kWarmupSweeps; ++w) sweep();
      window.arrive_and_wait();
      const double c0 = thread_cpu_seconds();
      long long done = 0;
      while (window.open()) {
        sweep();
        done += end - begin;
      }
      cpu[t] = thread_cpu_seconds() - c0;
      steps[t] = done;
    });
  }
  const double elapsed = window.run(pool, seconds);
  long long total = 0;
  double cpu_total = 0.0;
  for (int t = 0; t < threads; ++t) {
    total += steps[t];
    cpu_total += cpu[t];
  }
  std::printf("%.6g %.6g\n", total / elapsed, total > 0 ? cpu_total / total * 1e6 : 0.0);
  return 0;
}
