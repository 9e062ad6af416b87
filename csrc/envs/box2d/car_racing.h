// CarRacing-v3 (and EnvPool's CarRacing-v2) as a pool env: Gymnasium 1.4's
// car_racing.py with its 96x96x3 state_pixels observation.
//
// The track, the physics and the reward are car_racing_sim.h's (bit-identical
// to Gymnasium); the picture is car_racing_render.h's software rasterizer
// (statistically close to pygame's, see there).  Gymnasium draws the track and
// the domain-randomized colours from its np_random (NumPy's PCG64); here a
// NumpyRandom is seeded at every reset from the pool's per-env Rng, so with
// `reset(seed=s)` for the same s the reference builds the same track.
//
// CarRacing-v2 is Gymnasium 0.29's v2: a completed lap truncates the episode
// instead of terminating it (everything else as v3).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "../../env.h"
#include "../numpy_random.h"
#include "car_racing_render.h"
#include "car_racing_sim.h"

namespace torchfrag {
namespace box2d {

class CarRacing : public Env {
 public:
  static EnvSpec SpecFor(const Options* opts) {
    EnvSpec s;
    s.options = {
        opt_bool("continuous", true,
                 "Box([-1, 0, 0], [1, 1, 1]) steer/gas/brake instead of 5 discrete actions "
                 "(nothing, left, right, gas, brake)"),
        in_range(opt_float("lap_complete_percent", 0.95,
                           "fraction of tiles to visit before crossing the start completes a lap"),
                 0.0, 1.0),
        opt_bool("domain_randomize", false,
                 "draw the road, background and grass colours at every reset, as Gymnasium's"),
        in_range(opt_int("frame_skip", 1,
                         "physics steps per action (rewards summed, one picture at the end; "
                         "max_episode_steps counts actions); 1: Gymnasium's"),
                 1, 1000)};
    const bool continuous = opts ? opts->num("continuous") != 0.0 : true;
    ArraySpec obs;
    obs.name = "obs";
    obs.dtype = DType::kUInt8;
    obs.shape = {car_racing::kStateSize, car_racing::kStateSize, 3};
    obs.low = {0.0};
    obs.high = {255.0};
    s.obs = obs;
    s.action = continuous ? box_action({3}, {-1.0, 0.0, 0.0}, {1.0, 1.0, 1.0}) : discrete_action(5);
    s.max_episode_steps = 1000;
    s.reward_threshold = 900.0;
    return s;
  }

  CarRacing(const EnvOptions& o, bool lap_truncates)
      : continuous_(o.b("continuous")),
        domain_randomize_(o.b("domain_randomize")),
        lap_truncates_(lap_truncates),
        frame_skip_(static_cast<int>(o.i("frame_skip"))),
        sim_(o.f("lap_complete_percent")) {}

  void reset(Rng& rng, const Row& out) override {
    np_.seed(rng.next());
    if (domain_randomize_) {
      // _reinit_colors(True): road, background, then which grass channel is lighter.
      std::array<double, 3> road, bg;
      for (double& c : road) c = np_.uniform(0, 210);
      for (double& c : bg) c = np_.uniform(0, 210);
      std::array<double, 3> grass = bg;
      grass[static_cast<size_t>(np_.integers(0, 3))] += 20;
      renderer_.set_colours(road, bg, grass);
    }
    sim_.reset(np_);
    t_ = 1.0 / car::kFps;  // reset's own step(None)
    renderer_.draw(sim_, t_, out.obs<uint8_t>());
  }

  StepResult step(const Action& action, Rng&, const Row& out) override {
    const std::array<double, 3> a =
        continuous_ ? std::array<double, 3>{action.values[0], action.values[1], action.values[2]}
                    : CarRacingSim::discrete_action(static_cast<int>(action.discrete));
    // Action repeat: the picture is the costly part of a step (the rasterizer), so it is drawn
    // once, after the last physics step; an episode that ends mid-repeat stops there.
    CarRacingSim::StepOut s{};
    double reward = 0.0;
    for (int k = 0; k < frame_skip_; ++k) {
      s = sim_.step(a);
      t_ += 1.0 / car::kFps;
      reward += s.reward;
      if (s.terminated || (lap_truncates_ && s.lap_complete)) break;
    }
    renderer_.draw(sim_, t_, out.obs<uint8_t>());
    StepResult r;
    r.reward = reward;
    r.terminated = s.terminated;
    if (lap_truncates_) {
      r.truncated = s.lap_complete;
      r.terminated = s.terminated && !s.lap_finished;
    }
    return r;
  }

 private:
  bool continuous_;
  bool domain_randomize_;
  bool lap_truncates_;
  int frame_skip_;
  NumpyRandom np_;
  CarRacingSim sim_;
  CarRacingRenderer renderer_;
  double t_ = 0.0;
};

struct CarRacingV3 : CarRacing {
  CarRacingV3(const EnvSpec&, const EnvOptions& o) : CarRacing(o, false) {}
  static EnvSpec Spec(const Options* o) { return SpecFor(o); }
};

struct CarRacingV2 : CarRacing {
  CarRacingV2(const EnvSpec&, const EnvOptions& o) : CarRacing(o, true) {}
  static EnvSpec Spec(const Options* o) { return SpecFor(o); }
};

}  // namespace box2d
}  // namespace torchfrag
