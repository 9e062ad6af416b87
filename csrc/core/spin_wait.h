// How the pool's threads wait: spin a bounded while, then sleep on a futex
// (the caller's condition variable). One SpinWait per wait site (workers
// waiting for work, a sync caller waiting for its chunks, recv waiting for a
// batch), because each site succeeds at spinning in its own pattern.
//
// Policies (the pool option `wait_policy`):
//   block     never spin: sleep at once. Least CPU; a wake-up costs a futex
//             round trip (microseconds on an idle core, a scheduling slice on
//             a busy host).
//   adaptive  spin up to `spin_us` (default 50 us), and stop spinning at a
//             site whose spins keep failing (its waits are longer than the
//             window: a slow policy between steps, an oversubscribed host),
//             probing again every kProbeEvery waits. The default.
//   spin      spin up to `spin_us` (default 2000 us) every time: lowest
//             latency on a dedicated machine, at the price of CPU burnt
//             between calls.
// Every wait ends in a sleep, so an idle pool uses no CPU after one window.
//
// Spinning uses the CPU's pause instruction, not sched_yield(): a yield
// under Linux's EEVDF scheduler pushes the yielding thread's deadline back a
// whole slice while it stays runnable, and measured no better here.
//
// Unit-tested on its own in csrc/tests/test_core.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace torchfrag {

enum class WaitPolicy { kBlock, kAdaptive, kSpin };

// Longest spin window: far below the pool's 20 ms interrupt poll, so a spin
// never delays Ctrl-C noticeably.
constexpr double kMaxSpinUs = 10000.0;

inline WaitPolicy parse_wait_policy(const std::string& name) {
  if (name == "adaptive") return WaitPolicy::kAdaptive;
  if (name == "spin") return WaitPolicy::kSpin;
  if (name == "block") return WaitPolicy::kBlock;
  throw std::invalid_argument("wait_policy must be 'adaptive', 'spin' or 'block', got '" + name +
                              "'");
}

inline const char* wait_policy_name(WaitPolicy p) {
  switch (p) {
    case WaitPolicy::kBlock: return "block";
    case WaitPolicy::kSpin: return "spin";
    default: return "adaptive";
  }
}

inline double default_spin_us(WaitPolicy p) {
  switch (p) {
    case WaitPolicy::kBlock: return 0.0;
    case WaitPolicy::kSpin: return 2000.0;
    default: return 50.0;
  }
}

inline std::string spin_text(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", us);
  return buf;
}

// The spin window of `policy` given the user's `spin_us` (negative: the
// policy's default); invalid_argument for values the policy cannot take.
inline double resolve_spin_us(WaitPolicy policy, double spin_us) {
  if (spin_us < 0.0 && !std::isnan(spin_us)) return default_spin_us(policy);
  if (!(spin_us >= 0.0 && spin_us <= kMaxSpinUs)) {
    throw std::invalid_argument("spin_us must be a number in [0, 10000] (microseconds), got " +
                                spin_text(spin_us));
  }
  if (policy == WaitPolicy::kBlock && spin_us > 0.0) {
    throw std::invalid_argument(
        "spin_us applies to wait_policy 'adaptive' and 'spin'; 'block' never spins (got "
        "spin_us=" + spin_text(spin_us) + ")");
  }
  return spin_us;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class SpinWait {
 public:
  // After this many failed spins in a row an adaptive site stops spinning...
  static constexpr int kMissLimit = 8;
  // ...except on one wait in this many, to notice when spinning pays again.
  static constexpr uint32_t kProbeEvery = 16;

  SpinWait(WaitPolicy policy, double spin_us)
      : adaptive_(policy == WaitPolicy::kAdaptive),
        window_(std::chrono::nanoseconds(static_cast<int64_t>(spin_us * 1000.0))) {}
  SpinWait(const SpinWait&) = delete;
  SpinWait& operator=(const SpinWait&) = delete;

  // Spins until `ready()` or the window ends; returns ready(). The caller
  // sleeps (on its condition variable) when this returns false.
  template <typename Pred>
  bool spin(Pred ready) {
    if (ready()) return true;
    if (window_.count() <= 0) return false;
    if (adaptive_ && misses_.load(std::memory_order_relaxed) >= kMissLimit &&
        waits_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery != 0) {
      return false;
    }
    const auto deadline = std::chrono::steady_clock::now() + window_;
    for (;;) {
      for (int k = 0; k < 32; ++k) {
        if (ready()) {
          misses_.store(0, std::memory_order_relaxed);
          return true;
        }
        cpu_relax();
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
    }
    const int m = misses_.load(std::memory_order_relaxed);
    if (m < kMissLimit) misses_.store(m + 1, std::memory_order_relaxed);
    return ready();
  }

  // Whether an adaptive site has stopped spinning (tests, diagnostics).
  bool backed_off() const { return adaptive_ && misses_.load() >= kMissLimit; }

 private:
  bool adaptive_;
  std::chrono::nanoseconds window_;
  std::atomic<int> misses_{0};     // failed spins in a row (racy by design: a hint)
  std::atomic<uint32_t> waits_{0};  // waits skipped while backed off
};

}  // namespace torchfrag
