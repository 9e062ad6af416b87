// NumPy's default generator, draw for draw: PCG64 seeded through SeedSequence,
// with the bounded-integer and shuffle algorithms of `numpy.random.Generator`.
//
// MiniGrid draws every layout (and Dynamic-Obstacles every obstacle move) from
// Gymnasium's `np_random`, which is `Generator(PCG64(SeedSequence(seed)))`.
// Reproducing that stream exactly lets the C++ envs build the very same
// layouts as the `minigrid` package from the same seed, so alignment is
// checked on whole episodes without injecting state.  The algorithms are
// specified by NumPy (SeedSequence's hash mixing, PCG64's XSL-RR output,
// Lemire's bounded integers, the buffered 32-bit halves of a 64-bit draw).
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace torchfrag {

class NumpyRandom {
 public:
  NumpyRandom() { seed(0); }

  // Same stream as `np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))`.
  void seed(uint64_t entropy) {
    const std::array<uint64_t, 4> words = seed_sequence_state(entropy);
    const u128 initstate = (static_cast<u128>(words[0]) << 64) | words[1];
    const u128 initseq = (static_cast<u128>(words[2]) << 64) | words[3];
    state_ = 0;
    inc_ = (initseq << 1) | 1u;
    advance();
    state_ += initstate;
    advance();
    has_half_ = false;
  }

  uint64_t next64() {
    advance();
    const uint64_t hi = static_cast<uint64_t>(state_ >> 64);
    const uint64_t lo = static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    const uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64u - rot) & 63u));
  }

  // NumPy hands out a 64-bit draw as two 32-bit values, low half first.
  uint32_t next32() {
    if (has_half_) {
      has_half_ = false;
      return half_;
    }
    const uint64_t x = next64();
    has_half_ = true;
    half_ = static_cast<uint32_t>(x >> 32);
    return static_cast<uint32_t>(x);
  }

  // `Generator.integers(low, high)` for int64 scalars: uniform in [low, high).
  int64_t integers(int64_t low, int64_t high) {
    if (high <= low) throw std::invalid_argument("integers: high <= low");
    const uint64_t range = static_cast<uint64_t>(high - low - 1);
    if (range == 0) return low;  // NumPy draws nothing for a single value
    if (range > 0xFFFFFFFFull) throw std::invalid_argument("integers: range beyond 32 bits");
    if (range == 0xFFFFFFFFull) return low + next32();
    // Lemire's multiply-shift with rejection, as NumPy's buffered_bounded_lemire_uint32.
    const uint32_t excl = static_cast<uint32_t>(range) + 1u;
    uint64_t m = static_cast<uint64_t>(next32()) * excl;
    uint32_t leftover = static_cast<uint32_t>(m);
    if (leftover < excl) {
      const uint32_t threshold = (0xFFFFFFFFu - static_cast<uint32_t>(range)) % excl;
      while (leftover < threshold) {
        m = static_cast<uint64_t>(next32()) * excl;
        leftover = static_cast<uint32_t>(m);
      }
    }
    return low + static_cast<int64_t>(m >> 32);
  }

  // `Generator.shuffle` of a Python list: Fisher-Yates from the back with
  // NumPy's masked-rejection `random_interval`.
  template <typename T>
  void shuffle(std::vector<T>& xs) {
    for (size_t i = xs.size(); i-- > 1;) {
      const size_t j = static_cast<size_t>(interval(i));
      std::swap(xs[i], xs[j]);
    }
  }

 private:
  using u128 = unsigned __int128;

  // NumPy's random_interval: uniform in [0, max] by masking and rejection.
  uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int s = 1; s <= 32; s <<= 1) mask |= mask >> s;
    uint64_t v;
    if (max <= 0xFFFFFFFFull) {
      while ((v = (next32() & mask)) > max) {
      }
    } else {
      while ((v = (next64() & mask)) > max) {
      }
    }
    return v;
  }

  void advance() {
    static const u128 kMult =
        (static_cast<u128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;
    state_ = state_ * kMult + inc_;
  }

  // SeedSequence(entropy).generate_state(4, uint64) with the default pool of 4 words.
  static std::array<uint64_t, 4> seed_sequence_state(uint64_t entropy) {
    constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
    constexpr uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
    constexpr uint32_t kMixL = 0xca01f9ddu, kMixR = 0x4973f715u;
    // The integer as little-endian 32-bit words (0 is one word).
    std::vector<uint32_t> words;
    for (uint64_t x = entropy;;) {
      words.push_back(static_cast<uint32_t>(x));
      x >>= 32;
      if (x == 0) break;
    }
    uint32_t hash = kInitA;
    auto hashmix = [&hash](uint32_t v) {
      v ^= hash;
      hash *= kMultA;
      v *= hash;
      return v ^ (v >> 16);
    };
    auto mix = [](uint32_t x, uint32_t y) {
      uint32_t r = kMixL * x - kMixR * y;
      return r ^ (r >> 16);
    };
    std::array<uint32_t, 4> pool{};
    for (size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < words.size() ? words[i] : 0u);
    for (size_t s = 0; s < 4; ++s) {
      for (size_t d = 0; d < 4; ++d) {
        if (s != d) pool[d] = mix(pool[d], hashmix(pool[s]));
      }
    }
    for (size_t s = 4; s < words.size(); ++s) {
      for (size_t d = 0; d < 4; ++d) pool[d] = mix(pool[d], hashmix(words[s]));
    }
    uint32_t hb = kInitB;
    std::array<uint32_t, 8> out32{};
    for (size_t i = 0; i < 8; ++i) {
      uint32_t v = pool[i % 4];
      v ^= hb;
      hb *= kMultB;
      v *= hb;
      out32[i] = v ^ (v >> 16);
    }
    std::array<uint64_t, 4> out{};
    for (size_t i = 0; i < 4; ++i) {
      out[i] = static_cast<uint64_t>(out32[2 * i]) |
               (static_cast<uint64_t>(out32[2 * i + 1]) << 32);
    }
    return out;
  }

  u128 state_ = 0, inc_ = 0;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

}  // namespace torchfrag
