// The physics limit of the Box2D family: our Box2D envs stepped in a
// plain loop, `threads` threads each owning a contiguous chunk of envs, with
// no pool around them (no queues, batches, Python or action checks).  What it
// measures is b2World::Step plus the env's few lines of arithmetic (and
// CarRacing's 96x96 picture, which every step draws), with perfect
// parallelism: the most steps/s any pool could reach with these envs.
//
// Built by benchmarks/catalog.py against the Box2D objects of the extension's
// build (same sources, same flags).  Usage:
//   box2d_limit <env id> <num_envs> <threads> <seconds> [cycle]
// cycle > 0: each thread draws the actions of `cycle` sweeps once (box
// actions rounded to float32, as the pools receive them) and replays them, as
// the catalogue's pools replay their ACTION_BATCHES action batches, so the
// physics sees the same kind of forcing (dmc_limit.cpp does the same); 0 or
// absent: fresh actions every step.
// prints the steps per second.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <string>

#include "envs/box2d/bipedal_walker.h"
#include "envs/box2d/car_racing.h"
#include "envs/box2d/lunar_lander.h"
#include "limit_window.h"

using torchfrag::Action;
using torchfrag::EnvOptions;
using torchfrag::EnvSpec;
using torchfrag::Options;
using torchfrag::Rng;
using torchfrag::Row;

namespace {

constexpr int kWarmupSweeps = 60;  // steps per env before the clock starts

// One env's action of one step: the discrete choice and up to 4 box values.
struct Draw {
  int64_t discrete = 0;
  double values[4] = {0.0, 0.0, 0.0, 0.0};
};

template <typename EnvT>
double run(int num_envs, int threads, double seconds, long long cycle) {
  const EnvSpec spec = EnvT::Spec(nullptr);
  const Options options = Options::resolve(spec.options, {}, num_envs);
  const size_t obs_bytes = spec.obs.nbytes();  // CarRacing's is a 96x96x3 picture
  // Envs are built and reset before the clock starts (CarRacing's track and
  // road take milliseconds per env, which would otherwise eat the window).
  limit::Window window;
  std::vector<long long> steps(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int begin = num_envs * t / threads, end = num_envs * (t + 1) / threads;
      std::vector<std::unique_ptr<EnvT>> envs;
      std::vector<Rng> rngs;
      std::vector<uint8_t> obs(obs_bytes * static_cast<size_t>(end - begin));
      std::vector<int> length(end - begin, 0);
      for (int i = begin; i < end; ++i) {
        envs.push_back(std::make_unique<EnvT>(spec, EnvOptions(options, i)));
        rngs.emplace_back(torchfrag::env_seed(0, i));
      }
      auto row = [&](int k) {
        return Row(&obs[obs_bytes * static_cast<size_t>(k)], nullptr, nullptr, 0);
      };
      for (int k = 0; k < end - begin; ++k) envs[k]->reset(rngs[k], row(k));
      Rng actions(12345 + t);
      // One random action. Within the action box, as the benchmark's actions
      // (CarRacing's gas and brake are [0, 1]; every other Box2D action box is
      // [-1, 1]); `as_float32`: rounded as the pools' float32 actions are.
      auto draw = [&](Draw& d, bool as_float32) {
        d.discrete =
            static_cast<int64_t>(actions.integer(spec.action.discrete ? spec.action.n : 4));
        for (size_t j = 0; j < 4; ++j) {
          const bool box = !spec.action.discrete && j < spec.action.low.size();
          d.values[j] = box ? actions.uniform(spec.action.low[j], spec.action.high[j])
                            : actions.uniform(-1.0, 1.0);
          if (as_float32) d.values[j] = static_cast<double>(static_cast<float>(d.values[j]));
        }
      };
      const size_t count = static_cast<size_t>(end - begin);
      // cycle > 0: the actions of `cycle` sweeps drawn once and replayed, as
      // the catalogue's pools get theirs (a fixed set of action batches).
      std::vector<Draw> table(cycle > 0 ? static_cast<size_t>(cycle) * count : 0);
      for (Draw& d : table) draw(d, true);
      long long sweeps = 0;
      Draw fresh;
      // One sweep: every env of the chunk takes one step.
      auto sweep = [&] {
        const Draw* replay = cycle > 0 ? table.data() + (sweeps % cycle) * count : nullptr;
        ++sweeps;
        for (int k = 0; k < end - begin; ++k) {
          if (replay == nullptr) draw(fresh, false);
          const Draw& d = replay != nullptr ? replay[k] : fresh;
          Action a;
          a.discrete = d.discrete;
          a.values = d.values;
          const auto r = envs[k]->step(a, rngs[k], row(k));
          // The pool's time limit and auto-reset, so episodes look the same.
          if (r.terminated || r.truncated || ++length[k] >= spec.max_episode_steps) {
            envs[k]->reset(rngs[k], row(k));
            length[k] = 0;
          }
        }
      };
      // Warm-up before the clock: CarRacing's first second (50 steps) zooms in
      // from a view of the whole track, whose frames cost ~1.6x a later one's.
      // Unwarmed, a short window with many envs measured mostly those frames
      // (256 envs at ~3k steps/s: ~12 steps each), while the pool's medians are
      // taken later in the episodes: the limit then read below the pool.
      for (int w = 0; w < kWarmupSweeps; ++w) sweep();
      window.arrive_and_wait();
      long long done = 0;
      while (window.open()) {
        sweep();
        done += end - begin;
      }
      steps[t] = done;
    });
  }
  const double elapsed = window.run(pool, seconds);
  long long total = 0;
  for (long long s : steps) total += s;
  return total / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s <env id> <num_envs> <threads> <seconds> [cycle]\n",
                 argv[0]);
    return 2;
  }
  const long long cycle = argc == 6 ? std::atoll(argv[5]) : 0;
  const std::string id = argv[1];
  const int num_envs = std::atoi(argv[2]);
  const int threads = std::atoi(argv[3]);
  const double seconds = std::atof(argv[4]);
  namespace b = torchfrag::box2d;
  double rate;
  if (id == "LunarLander-v3") {
    rate = run<b::LunarLanderDiscrete>(num_envs, threads, seconds, cycle);
  } else if (id == "LunarLanderContinuous-v3") {
    rate = run<b::LunarLanderContinuous>(num_envs, threads, seconds, cycle);
  } else if (id == "BipedalWalker-v3") {
    rate = run<b::BipedalWalkerNormal>(num_envs, threads, seconds, cycle);
  } else if (id == "BipedalWalkerHardcore-v3") {
    rate = run<b::BipedalWalkerHardcore>(num_envs, threads, seconds, cycle);
  } else if (id == "CarRacing-v3") {
    rate = run<b::CarRacingV3>(num_envs, threads, seconds, cycle);
  } else {
    std::fprintf(stderr, "unknown env id %s\n", id.c_str());
    return 2;
  }
  std::printf("%.1f\n", rate);
  return 0;
}
