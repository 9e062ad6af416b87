// The env interface: what an env family implements.
//
// An env writes its observation and infos straight into its row of the
// pool's batch buffers (no intermediate copies).  The pool owns time limits,
// auto-reset, seeding and bookkeeping; an env only knows how to reset and
// step itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "options.h"
#include "rng.h"
#include "spec.h"

namespace torchfrag {

// Pointers to one env's row in every output array of a batch.  Cheap to build
// (no allocation): it refers to the batch's arrays and a row index.
class Row {
 public:
  Row(uint8_t* obs, uint8_t* const* info_bases, const size_t* info_row_bytes, int64_t row)
      : obs_(obs), info_bases_(info_bases), info_row_bytes_(info_row_bytes), row_(row) {}

  template <typename T>
  T* obs() const {
    return reinterpret_cast<T*>(obs_);
  }
  // Info arrays in the order the spec declares them.
  template <typename T>
  T* info(size_t k) const {
    return reinterpret_cast<T*>(info_bases_[k] + info_row_bytes_[k] * static_cast<size_t>(row_));
  }
  uint8_t* obs_bytes() const { return obs_; }

 private:
  uint8_t* obs_;
  uint8_t* const* info_bases_;
  const size_t* info_row_bytes_;
  int64_t row_;
};

// The action of one env: `discrete` for discrete spaces, `values` (numel of
// the action shape, already checked finite) for continuous ones.
struct Action {
  int64_t discrete = 0;
  const double* values = nullptr;
};

// What an env exposes for rendering (Env::render): its RGB screen where it has
// one (Atari: ALE's getScreenRGB), else the state a renderer outside the pool
// draws from (classic control: the state plus what its picture shows besides;
// MuJoCo: qpos then qvel).  Filled only when asked for, so rendering costs
// nothing to a pool that never renders.
struct RenderData {
  std::vector<uint8_t> rgb;  // height * width * 3, row-major, when the env has a screen
  int64_t height = 0;
  int64_t width = 0;
  std::vector<double> state;  // otherwise
};

struct StepResult {
  double reward = 0.0;
  bool terminated = false;
  bool truncated = false;  // env-level truncation; the pool adds max_episode_steps
};

class Env {
 public:
  virtual ~Env() = default;
  // Start a new episode; write the first observation and the infos.
  virtual void reset(Rng& rng, const Row& out) = 0;
  // A reset the user asked for (Pool::reset / async_reset), as opposed to the
  // pool's own auto-reset of a finished episode.  Envs whose auto-reset may
  // continue a game (Atari under episodic life) start a new one here.
  virtual void explicit_reset(Rng& rng, const Row& out) { reset(rng, out); }
  // Advance one step; write the observation and the infos.
  virtual StepResult step(const Action& action, Rng& rng, const Row& out) = 0;
  // Fills `out` with what a frame of the current state is drawn from; false
  // for envs that have nothing to show.  Called between steps (on a worker
  // thread for a kept terminal state), never concurrently with the env's own
  // reset or step.
  virtual bool render(RenderData* out) {
    (void)out;
    return false;
  }
};

// A family of env ids sharing one implementation (all Atari games, say).
class EnvFamily {
 public:
  virtual ~EnvFamily() = default;
  virtual std::vector<std::string> ids() const = 0;
  // Spec of `id` under the given (already resolved, scalar-view) options.  The
  // options list returned must be the same for every call with the same id.
  virtual EnvSpec spec(const std::string& id, const Options* options) const = 0;
  virtual std::unique_ptr<Env> make(const std::string& id, const EnvSpec& spec,
                                    const EnvOptions& options) const = 0;
};

// Convenience family for one C++ class per env id.  `EnvT` provides:
//   static EnvSpec Spec(const Options* opts);   // opts null: defaults only
//   EnvT(const EnvSpec& spec, const EnvOptions& opts);
template <typename EnvT>
class SingleEnvFamily : public EnvFamily {
 public:
  explicit SingleEnvFamily(std::string id) : id_(std::move(id)) {}
  std::vector<std::string> ids() const override { return {id_}; }
  EnvSpec spec(const std::string&, const Options* options) const override {
    EnvSpec s = EnvT::Spec(options);
    s.id = id_;
    return s;
  }
  std::unique_ptr<Env> make(const std::string&, const EnvSpec& spec,
                            const EnvOptions& options) const override {
    return std::make_unique<EnvT>(spec, options);
  }

 private:
  std::string id_;
};

}  // namespace torchfrag
