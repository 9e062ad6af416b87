// How one job (a step, reset or send over n envs) is cut into chunks, and the
// lock-free claiming of those chunks by the threads that run them.
//
// Kept apart from Pool (no envs, no buffers, no threads of its own) so it can
// be unit-tested on its own: csrc/tests/test_core.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

namespace torchfrag {

struct ChunkPlan {
  int64_t chunk = 1;         // most items in one chunk (chunks differ by at most one item)
  int64_t nchunks = 1;
  bool run_inline = false;   // cheap enough to run whole on the calling thread
};

// Sizes chunks for `n` items estimated at `est_ns` each, shared by
// `participants` threads. Below `inline_ns` of total work (or without
// workers) the job is one chunk run by the caller: waking a worker costs more.
// Otherwise a chunk lasts at most about `chunk_ns` (small chunks balance
// uneven envs, big enough ones amortise the claim), and every participant
// gets the same number of chunks of (nearly) equal size: with 3 chunks for 2
// threads (8 envs of 4.5 us cut by time into 3 + 3 + 2) one thread stepped 5
// envs while the other waited for 2 of them, every call.
inline ChunkPlan plan_chunks(int64_t n, double est_ns, int64_t participants, bool has_workers,
                             double inline_ns, double chunk_ns) {
  ChunkPlan p;
  if (!has_workers || est_ns * static_cast<double>(n) < inline_ns) {
    p.chunk = std::max<int64_t>(n, 1);
    p.nchunks = 1;
    p.run_inline = true;
    return p;
  }
  participants = std::max<int64_t>(participants, 1);
  const int64_t by_time = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(chunk_ns / std::max(est_ns, 1e-9))));
  // Chunks per participant, so that none lasts longer than `by_time` items.
  const int64_t rounds = (n + participants * by_time - 1) / (participants * by_time);
  p.nchunks = std::max<int64_t>(1, std::min<int64_t>(n, participants * rounds));
  p.chunk = (n + p.nchunks - 1) / p.nchunks;
  return p;
}

// Hands out the chunks of one plan, each exactly once, to any number of
// threads; counts finished chunks so exactly one thread sees the last one.
class ChunkClaims {
 public:
  ChunkClaims() = default;
  ChunkClaims(int64_t n, const ChunkPlan& plan) { reset(n, plan); }
  ChunkClaims(const ChunkClaims&) = delete;
  ChunkClaims& operator=(const ChunkClaims&) = delete;

  // Not thread-safe: before the claims are shared.
  void reset(int64_t n, const ChunkPlan& plan) {
    n_ = n;
    chunk_ = plan.chunk;
    nchunks_ = plan.nchunks;
    next_.store(0);
    done_.store(0);
  }

  int64_t nchunks() const { return nchunks_; }
  int64_t chunk() const { return chunk_; }

  // Claims the next chunk: items [*begin, *end), the c-th of `nchunks`
  // near-equal parts of [0, n). False when none is left.
  bool claim(int64_t* begin, int64_t* end) {
    const int64_t c = next_.fetch_add(1);
    if (c >= nchunks_) return false;
    *begin = c * n_ / nchunks_;
    *end = (c + 1) * n_ / nchunks_;
    return true;
  }
  // Whether every chunk has been claimed (possibly not finished).
  bool all_claimed() const { return next_.load() >= nchunks_; }
  // No chunk is handed out after this; chunks already claimed still finish.
  void cancel() { next_.store(nchunks_); }
  // Marks a claimed chunk finished; true for exactly one call, the last one.
  bool finish() { return done_.fetch_add(1) + 1 == nchunks_; }
  bool all_done() const { return done_.load() == nchunks_; }

 private:
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t nchunks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
};

}  // namespace torchfrag
