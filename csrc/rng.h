// Per-env random numbers: xoshiro256++ seeded through splitmix64.
//
// Each env owns its generator, so a trajectory depends only on (seed, env
// index) and the env's own actions, never on thread scheduling.
#pragma once

#include <cstdint>

namespace torchfrag {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Seed of env `index` in a pool seeded with `seed`.
inline uint64_t env_seed(uint64_t seed, uint64_t index) {
  return splitmix64(splitmix64(seed) ^ splitmix64(index + 0x632BE59BD9B4E019ULL));
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s_) {
      x = splitmix64(x);
      w = x;
    }
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double low, double high) { return low + (high - low) * uniform(); }
  // Uniform integer in [0, n) (n > 0), without modulo bias.
  uint64_t integer(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }
  // Standard normal (Box-Muller; one value per call keeps the state simple).
  double normal();

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace torchfrag

#include <cmath>

inline double torchfrag::Rng::normal() {
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
