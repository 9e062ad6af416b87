// Unit tests of the pool's core pieces without Python, envs or buffers: the
// chunk planner and claims (csrc/core/chunk_scheduler.h), the async batch
// ring (csrc/core/async_ring.h) and the wait policy (csrc/core/spin_wait.h). Built and run by tests/test_core_cpp.py,
// also under ThreadSanitizer. Prints "ALL PASSED" and exits 0 on success.
//
// Usage: test_core [name-filter]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../core/async_ring.h"
#include "../core/chunk_scheduler.h"
#include "../core/spin_wait.h"

using namespace torchfrag;

namespace {

int g_failures = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                              \
    }                                                                            \
  } while (0)

std::map<std::string, std::function<void()>>& registry() {
  static std::map<std::string, std::function<void()>> tests;
  return tests;
}

struct Register {
  Register(const char* name, std::function<void()> fn) { registry()[name] = std::move(fn); }
};

#define TEST(name)                                    \
  void name();                                        \
  const Register register_##name(#name, name);        \
  void name()

// Runs fn(thread_index) on `threads` threads started together.
void on_threads(int threads, const std::function<void(int)>& fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      fn(t);
    });
  }
  for (auto& t : ts) t.join();
}

// -- plan_chunks ------------------------------------------------------------------

TEST(plan_cheap_work_runs_inline) {
  // 256 CartPoles at 50 ns: 12.8 us < 20 us of inline budget.
  ChunkPlan p = plan_chunks(256, 50.0, 3, true, 20000.0, 10000.0);
  CHECK(p.run_inline && p.nchunks == 1 && p.chunk == 256);
  // No workers: always inline, even when expensive.
  p = plan_chunks(8, 1e9, 1, false, 20000.0, 10000.0);
  CHECK(p.run_inline && p.nchunks == 1 && p.chunk == 8);
  // An empty job is one empty inline chunk.
  p = plan_chunks(0, 1e9, 4, true, 20000.0, 10000.0);
  CHECK(p.run_inline && p.nchunks == 1);
}

TEST(plan_chunks_last_about_chunk_ns_and_cover_all_items) {
  for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
    for (double est : {200.0, 1000.0, 2.5e4, 1e6}) {
      for (int64_t parts : {1, 2, 3, 17}) {
        const ChunkPlan p = plan_chunks(n, est, parts, true, 20000.0, 10000.0);
        if (p.run_inline) {
          CHECK(est * n < 20000.0);
          continue;
        }
        CHECK(p.chunk >= 1 && p.nchunks >= 1 && p.nchunks <= n);
        CHECK(p.chunk == (n + p.nchunks - 1) / p.nchunks);
        // The same number of chunks for every participant, or one item per chunk.
        CHECK(p.nchunks % parts == 0 || p.nchunks == n);
        // Never longer than ~chunk_ns unless one item is longer on its own.
        CHECK(p.chunk == 1 || p.chunk * est <= 10000.0 + est);
        // At least `parts` chunks when there are enough items.
        if (n >= parts) CHECK(p.nchunks >= std::min<int64_t>(parts, n) || p.chunk * est <= 10000.0 + est);
      }
    }
  }
}

// -- ChunkClaims ------------------------------------------------------------------

TEST(chunks_are_near_equal_and_shared_evenly) {
  // 8 envs of 4.5 us on a caller and one worker: 2 + 2 chunks of 2 (by time
  // alone it was 3 + 3 + 2: one thread idle for two envs' time every call).
  ChunkPlan p = plan_chunks(8, 4500.0, 2, true, 20000.0, 10000.0);
  CHECK(!p.run_inline && p.nchunks == 4 && p.chunk == 2);
  // Envs longer than chunk_ns alone: one env per chunk, claimed dynamically.
  p = plan_chunks(8, 1.1e5, 3, true, 20000.0, 10000.0);
  CHECK(p.nchunks == 8 && p.chunk == 1);
  // Claimed sizes differ by at most one item.
  for (int64_t n : {7, 8, 9, 33, 100}) {
    ChunkPlan q = plan_chunks(n, 4500.0, 3, true, 20000.0, 10000.0);
    ChunkClaims claims(n, q);
    int64_t b = 0, e = 0, lo = n, hi = 0, covered = 0;
    while (claims.claim(&b, &e)) {
      CHECK(b == covered);
      covered = e;
      lo = std::min(lo, e - b);
      hi = std::max(hi, e - b);
    }
    CHECK(covered == n && hi - lo <= 1 && hi == q.chunk);
  }
}

TEST(claims_hand_out_every_item_once_across_threads) {
  for (int64_t n : {1, 5, 100, 10007}) {
    for (int64_t chunk : {1, 3, 64}) {
      ChunkPlan plan;
      plan.chunk = chunk;
      plan.nchunks = (n + chunk - 1) / chunk;
      ChunkClaims claims(n, plan);
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      for (auto& s : seen) s.store(0);
      std::atomic<int> last_calls{0};
      on_threads(4, [&](int) {
        int64_t b = 0, e = 0;
        while (claims.claim(&b, &e)) {
          CHECK(0 <= b && b < e && e <= n);
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
          if (claims.finish()) last_calls.fetch_add(1);
        }
      });
      for (auto& s : seen) CHECK(s.load() == 1);
      CHECK(last_calls.load() == 1);  // exactly one thread sees the last chunk
      CHECK(claims.all_claimed() && claims.all_done());
    }
  }
}

TEST(homes_claim_their_own_range_first_then_steal) {
  // 8 envs in 4 chunks of 2 over 2 homes: home 0 owns envs 0-3, home 1 4-7.
  ChunkPlan plan = plan_chunks(8, 4500.0, 2, true, 20000.0, 10000.0);
  CHECK(plan.nchunks == 4);
  ChunkClaims claims(8, plan, 2);
  CHECK(claims.homes() == 2);
  int64_t b = 0, e = 0;
  CHECK(claims.claim(&b, &e, 1) && b == 4 && e == 6);
  CHECK(claims.claim(&b, &e, 0) && b == 0 && e == 2);
  CHECK(claims.claim(&b, &e, 1) && b == 6 && e == 8);
  // Home 1 is used up: it steals home 0's next chunk.
  CHECK(claims.claim(&b, &e, 1) && b == 2 && e == 4);
  CHECK(!claims.claim(&b, &e, 0) && !claims.claim(&b, &e, 1));
  CHECK(claims.all_claimed());
  // The home ranges do not depend on the chunk size (a drifting cost
  // estimate): home 1 starts at env 4 with 1, 2 or 4 chunks per home.
  for (int64_t per_home : {1, 2, 4}) {
    ChunkPlan q;
    q.nchunks = 2 * per_home;
    q.chunk = 8 / q.nchunks;
    ChunkClaims c(8, q, 2);
    CHECK(c.claim(&b, &e, 1) && b == 4);
  }
  // More homes than chunks: clamped, every chunk still handed out once.
  ChunkPlan two;
  two.nchunks = 2;
  two.chunk = 1;
  ChunkClaims few(2, two, 5);
  CHECK(few.homes() == 2);
  CHECK(few.claim(&b, &e, 4) && few.claim(&b, &e, 4) && !few.claim(&b, &e, 0));
}

TEST(homes_hand_out_every_item_once_across_threads) {
  for (int64_t n : {1, 7, 100, 10007}) {
    for (int64_t homes : {1, 2, 3, 5}) {
      ChunkPlan plan = plan_chunks(n, 1000.0, homes, true, 0.0, 3000.0);
      ChunkClaims claims(n, plan, homes);
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      for (auto& s : seen) s.store(0);
      std::atomic<int> last_calls{0};
      on_threads(4, [&](int t) {
        int64_t b = 0, e = 0;
        while (claims.claim(&b, &e, t)) {
          CHECK(0 <= b && b < e && e <= n);
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
          if (claims.finish()) last_calls.fetch_add(1);
        }
      });
      for (auto& s : seen) CHECK(s.load() == 1);
      CHECK(last_calls.load() == 1);
      CHECK(claims.all_claimed() && claims.all_done());
    }
  }
  // cancel() closes every home.
  ChunkPlan plan = plan_chunks(8, 4500.0, 2, true, 20000.0, 10000.0);
  ChunkClaims claims(8, plan, 2);
  int64_t b = 0, e = 0;
  CHECK(claims.claim(&b, &e, 1));
  claims.cancel();
  CHECK(claims.all_claimed() && !claims.claim(&b, &e, 0) && !claims.claim(&b, &e, 1));
}

TEST(cancel_stops_new_claims_but_claimed_chunks_finish) {
  ChunkPlan plan;
  plan.chunk = 1;
  plan.nchunks = 10;
  ChunkClaims claims(10, plan);
  int64_t b = 0, e = 0;
  CHECK(claims.claim(&b, &e) && b == 0 && e == 1);
  CHECK(claims.claim(&b, &e) && b == 1);
  claims.cancel();
  CHECK(claims.all_claimed());
  CHECK(!claims.claim(&b, &e));
  CHECK(!claims.finish());
  CHECK(!claims.finish());  // 2 of 10 finished: never "last"
  CHECK(!claims.all_done());
}

TEST(finish_counts_several_chunks_at_once_and_only_the_last_report_is_last) {
  // A sync job's threads report all their chunks in one call (Pool::run_chunks).
  ChunkPlan plan = plan_chunks(32, 4500.0, 2, true, 20000.0, 10000.0);
  ChunkClaims claims(32, plan, 2);
  const int64_t n = claims.nchunks();
  CHECK(n >= 4);
  CHECK(!claims.finish(n / 2));
  CHECK(!claims.all_done());
  CHECK(!claims.finish(n - n / 2 - 1));
  CHECK(claims.finish(1));
  CHECK(claims.all_done());
}

// -- AsyncRing --------------------------------------------------------------------

TEST(ring_sizes) {
  CHECK(AsyncRing::sets_needed(8, 8) == 3);
  CHECK(AsyncRing::sets_needed(8, 3) == 5);
  CHECK(AsyncRing::sets_needed(1, 1) == 3);
  bool threw = false;
  try {
    AsyncRing bad(0, 3);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}

TEST(ring_rows_in_claim_order_one_batch_after_another) {
  AsyncRing ring(3, AsyncRing::sets_needed(6, 3));
  for (int64_t b = 0; b < 7; ++b) {
    for (int64_t r = 0; r < 3; ++r) {
      const AsyncRing::Slot s = ring.claim();
      CHECK(s.batch == b && s.row == r && s.set == b % ring.num_sets());
      CHECK(!ring.ready(b));
      const bool last = ring.row_written(s);
      CHECK(last == (r == 2));
      if (last) ring.publish(b);
    }
    CHECK(ring.ready(b));
    CHECK(!ring.ready(b + 1));
    ring.consumed(b);
  }
}

// Producers (finishing envs) and one consumer (recv) as the pool runs them:
// every env result is received exactly once, batches in order, and a set is
// never refilled before its batch was consumed.
TEST(ring_producers_and_consumer_threads) {
  const int64_t num_envs = 12, bs = 4, rounds = 3000;
  AsyncRing ring(bs, AsyncRing::sets_needed(num_envs, bs));
  std::mutex mu;  // stands for Pool::ready_mu_
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(ring.num_sets()),
                                         std::vector<int64_t>(bs, -1));
  std::atomic<int64_t> produced{0};
  std::vector<int64_t> received;
  std::atomic<bool> overwrite{false};
  // Credits model the pool's in-flight rule: at most num_envs results
  // claimed past the last consumed batch.
  std::atomic<int64_t> credits{num_envs};
  std::thread consumer([&] {
    for (int64_t b = 0; b < rounds * num_envs / bs; ++b) {
      for (;;) {
        std::lock_guard<std::mutex> lock(mu);
        if (ring.ready(b)) break;
      }
      const auto& set = rows[ring.set_of(b)];
      for (int64_t r = 0; r < bs; ++r) received.push_back(set[r]);
      rows[ring.set_of(b)].assign(bs, -1);
      ring.consumed(b);
      credits.fetch_add(bs);
    }
  });
  on_threads(3, [&](int) {
    for (;;) {
      int64_t c = credits.load();
      if (produced.load() >= rounds * num_envs) return;
      if (c <= 0 || !credits.compare_exchange_weak(c, c - 1)) {
        std::this_thread::yield();
        continue;
      }
      const int64_t value = produced.fetch_add(1);
      if (value >= rounds * num_envs) return;
      const AsyncRing::Slot s = ring.claim();
      {
        std::lock_guard<std::mutex> lock(mu);
        if (rows[s.set][s.row] != -1) overwrite.store(true);
        rows[s.set][s.row] = value;
      }
      if (ring.row_written(s)) {
        std::lock_guard<std::mutex> lock(mu);
        ring.publish(s.batch);
      }
    }
  });
  consumer.join();
  CHECK(!overwrite.load());
  CHECK(static_cast<int64_t>(received.size()) == rounds * num_envs);
  std::set<int64_t> unique(received.begin(), received.end());
  CHECK(static_cast<int64_t>(unique.size()) == rounds * num_envs);
}

// -- SpinWait ---------------------------------------------------------------------

// Microseconds that spin(pred) took.
template <typename Pred>
double spin_us_taken(SpinWait& w, Pred pred, bool* result) {
  const auto t0 = std::chrono::steady_clock::now();
  *result = w.spin(pred);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

TEST(wait_policy_names_and_windows) {
  CHECK(parse_wait_policy("adaptive") == WaitPolicy::kAdaptive);
  CHECK(parse_wait_policy("spin") == WaitPolicy::kSpin);
  CHECK(parse_wait_policy("block") == WaitPolicy::kBlock);
  bool threw = false;
  try {
    parse_wait_policy("busy");
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("'busy'") != std::string::npos;
  }
  CHECK(threw);
  CHECK(resolve_spin_us(WaitPolicy::kAdaptive, -1.0) == 50.0);
  CHECK(resolve_spin_us(WaitPolicy::kSpin, -1.0) == 2000.0);
  CHECK(resolve_spin_us(WaitPolicy::kBlock, -1.0) == 0.0);
  CHECK(resolve_spin_us(WaitPolicy::kBlock, 0.0) == 0.0);
  CHECK(resolve_spin_us(WaitPolicy::kSpin, 10000.0) == 10000.0);
  for (double bad : {10000.5, std::nan("")}) {
    threw = false;
    try {
      resolve_spin_us(WaitPolicy::kAdaptive, bad);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    CHECK(threw);
  }
  threw = false;
  try {
    resolve_spin_us(WaitPolicy::kBlock, 5.0);  // a contradiction, not silently ignored
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}

TEST(spin_returns_at_once_when_ready_and_never_spins_when_blocking) {
  SpinWait block(WaitPolicy::kBlock, 0.0);
  bool r = false;
  // Generous bounds: the host may preempt us, but never for a whole window
  // of 10 ms on every one of several tries.
  double best = 1e9;
  for (int k = 0; k < 5; ++k) best = std::min(best, spin_us_taken(block, [] { return false; }, &r));
  CHECK(!r && best < 1000.0);
  CHECK(block.spin([] { return true; }));
  SpinWait spin(WaitPolicy::kSpin, 10000.0);
  best = 1e9;
  for (int k = 0; k < 5; ++k) best = std::min(best, spin_us_taken(spin, [] { return true; }, &r));
  CHECK(r && best < 1000.0);
}

TEST(spin_sees_a_flag_set_by_another_thread_within_its_window) {
  SpinWait w(WaitPolicy::kSpin, 10000.0);
  bool seen = false;
  // A loaded host may delay the setter past the window once; not three times.
  for (int attempt = 0; attempt < 3 && !seen; ++attempt) {
    std::atomic<bool> flag{false};
    std::thread setter([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      flag.store(true);
    });
    bool r = false;
    spin_us_taken(w, [&] { return flag.load(); }, &r);
    setter.join();
    seen = r;  // true only once the setter stored the flag
  }
  CHECK(seen);
}

TEST(spin_gives_up_after_its_window) {
  SpinWait w(WaitPolicy::kSpin, 300.0);
  bool r = true;
  const double us = spin_us_taken(w, [] { return false; }, &r);
  CHECK(!r);
  CHECK(us >= 300.0);
  CHECK(!w.backed_off());  // 'spin' spins every time
}

TEST(adaptive_backs_off_after_failed_spins_and_probes_again) {
  SpinWait w(WaitPolicy::kAdaptive, 2000.0);
  bool r = true;
  for (int k = 0; k < SpinWait::kMissLimit; ++k) w.spin([] { return false; });
  CHECK(w.backed_off());
  // Backed off: most waits return at once instead of spinning 2000 us.
  int fast = 0;
  for (uint32_t k = 0; k < SpinWait::kProbeEvery; ++k) {
    if (spin_us_taken(w, [] { return false; }, &r) < 1000.0) ++fast;
  }
  CHECK(fast >= static_cast<int>(SpinWait::kProbeEvery) - 2);
  // A probe that succeeds turns spinning back on.
  std::atomic<int> calls{0};
  for (uint32_t k = 0; k <= SpinWait::kProbeEvery && w.backed_off(); ++k) {
    w.spin([&] { return calls.fetch_add(1) > 0; });  // ready on the second look: a spin
  }
  CHECK(!w.backed_off());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  int ran = 0;
  for (const auto& [name, fn] : registry()) {
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    const int before = g_failures;
    fn();
    ++ran;
    std::printf("%s %s\n", g_failures == before ? "ok  " : "FAIL", name.c_str());
  }
  if (g_failures != 0 || ran == 0) {
    std::printf("%d check(s) failed, %d test(s) ran\n", g_failures, ran);
    return 1;
  }
  std::printf("ALL PASSED (%d tests)\n", ran);
  return 0;
}
