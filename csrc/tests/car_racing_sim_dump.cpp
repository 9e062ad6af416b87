// Drives csrc/envs/box2d/car_racing_sim.h from stdin, for
// tests/test_car_racing_track.py to compare with Gymnasium's CarRacing-v3.
// Commands, one a line: `R <seed>` (reset, prints the track length) and
// `S <steer> <gas> <brake>` or `D <action>` (a continuous or discrete step; prints reward, terminated, tiles visited,
// the hull's position, angle and velocities, and the four wheels' omega).
#include <array>
#include <cstdio>
#include <memory>

#include "envs/box2d/car_racing_sim.h"

int main() {
  auto sim = std::make_unique<torchfrag::box2d::CarRacingSim>();
  torchfrag::NumpyRandom rng;
  char cmd[2];
  while (std::scanf("%1s", cmd) == 1) {
    if (cmd[0] == 'R') {
      unsigned long long seed;
      if (std::scanf("%llu", &seed) != 1) return 2;
      rng.seed(seed);
      sim->reset(rng);
      std::printf("R %zu\n", sim->track().points.size());
      continue;
    }
    std::array<double, 3> a;
    if (cmd[0] == 'D') {
      int discrete;
      if (std::scanf("%d", &discrete) != 1) return 2;
      a = torchfrag::box2d::CarRacingSim::discrete_action(discrete);
    } else if (std::scanf("%lf %lf %lf", &a[0], &a[1], &a[2]) != 3) {
      return 2;
    }
    const auto r = sim->step(a);
    const b2Body* h = sim->hull();
    std::printf("S %.17g %d %d %.9g %.9g %.9g %.9g %.9g %.9g", r.reward, r.terminated ? 1 : 0,
                sim->tile_visited_count(), h->GetPosition().x, h->GetPosition().y, h->GetAngle(),
                h->GetLinearVelocity().x, h->GetLinearVelocity().y, h->GetAngularVelocity());
    for (const auto& w : sim->wheels()) std::printf(" %.17g", w.omega);
    std::printf("\n");
  }
  return 0;
}
