// Prints CarRacing tracks built by csrc/envs/box2d/car_racing_track.h, for
// tests/test_car_racing_track.py to compare with Gymnasium's `_create_track`.
// Usage: car_racing_track_dump <seed>...; per seed, one header line
//   seed attempts points polygons next_random
// then one line per centre-line point (alpha beta x y border) and one per
// polygon (kind tile x0 y0 ... x3 y3), all doubles printed round-trip exact.
#include <cstdio>
#include <cstdlib>

#include "envs/box2d/car_racing_track.h"

int main(int argc, char** argv) {
  for (int a = 1; a < argc; ++a) {
    const unsigned long long seed = std::strtoull(argv[a], nullptr, 10);
    torchfrag::NumpyRandom rng;
    rng.seed(seed);
    const torchfrag::box2d::Track t = torchfrag::box2d::create_track(rng);
    // The next draw shows how much of the stream the attempts consumed.
    std::printf("%llu %d %zu %zu %.17g\n", seed, t.attempts, t.points.size(), t.polygons.size(),
                rng.random());
    for (size_t i = 0; i < t.points.size(); ++i) {
      const auto& p = t.points[i];
      std::printf("%.17g %.17g %.17g %.17g %d\n", p.alpha, p.beta, p.x, p.y,
                  t.border[i] ? 1 : 0);
    }
    for (const auto& poly : t.polygons) {
      std::printf("%d %d", static_cast<int>(poly.kind), poly.tile);
      for (double v : poly.xy) std::printf(" %.17g", v);
      std::printf("\n");
    }
  }
  return 0;
}
