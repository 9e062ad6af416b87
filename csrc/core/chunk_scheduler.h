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
#include <vector>

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
//
// Chunk affinity: the chunks are split into `homes` contiguous home ranges,
// one per stepping participant (home h: chunks [h * nchunks / homes,
// (h + 1) * nchunks / homes)). A participant claims from its own home first
// and steals from the others' only when its home is used up, so in a run of
// sync steps the same thread steps the same envs every call and their MuJoCo
// or Box2D data stays in that core's cache (moving an env's data between
// cores cost ~1 us per CartpoleSwingup step, a quarter of its physics). The
// home ranges depend only on `n` and `homes` when nchunks is a multiple of
// homes (plan_chunks makes it one unless n < participants), not on the chunk
// size, so a drifting cost estimate does not reshuffle them.
class ChunkClaims {
 public:
  ChunkClaims() = default;
  ChunkClaims(int64_t n, const ChunkPlan& plan, int64_t homes = 1) { reset(n, plan, homes); }
  ChunkClaims(const ChunkClaims&) = delete;
  ChunkClaims& operator=(const ChunkClaims&) = delete;

  // Not thread-safe: before the claims are shared.
  void reset(int64_t n, const ChunkPlan& plan, int64_t homes = 1) {
    n_ = n;
    chunk_ = plan.chunk;
    nchunks_ = plan.nchunks;
    homes = std::max<int64_t>(1, std::min(homes, nchunks_));
    homes_ = homes;
    // Up to kInlineHomes in the object itself: a sync step makes one job per
    // call, and an allocation per call showed in its profile.
    if (homes > kInlineHomes) {
      if (static_cast<int64_t>(more_.size()) != homes) more_ = std::vector<Cursor>(homes);
      cursors_ = more_.data();
    } else {
      cursors_ = inline_;
    }
    for (int64_t h = 0; h < homes; ++h) {
      cursors_[h].next.store(h * nchunks_ / homes, std::memory_order_relaxed);
      cursors_[h].end = (h + 1) * nchunks_ / homes;
    }
    done_.store(0);
  }

  int64_t nchunks() const { return nchunks_; }
  int64_t chunk() const { return chunk_; }
  int64_t homes() const { return homes_; }

  // Claims a chunk for a participant whose home is `home` (taken modulo the
  // number of homes): items [*begin, *end), the c-th of `nchunks` near-equal
  // parts of [0, n). False when none is left anywhere.
  bool claim(int64_t* begin, int64_t* end, int64_t home = 0) {
    const int64_t homes = this->homes();
    if (homes == 0) return false;
    home = ((home % homes) + homes) % homes;
    for (int64_t k = 0; k < homes; ++k) {
      Cursor& cur = cursors_[(home + k) % homes];
      // A plain load first: a used-up home is skipped without a write to its
      // cache line (thieves would otherwise bounce it between cores).
      if (cur.next.load(std::memory_order_relaxed) >= cur.end) continue;
      const int64_t c = cur.next.fetch_add(1);
      if (c >= cur.end) continue;
      *begin = c * n_ / nchunks_;
      *end = (c + 1) * n_ / nchunks_;
      return true;
    }
    return false;
  }
  // Whether every chunk has been claimed (possibly not finished).
  bool all_claimed() const {
    for (int64_t h = 0; h < homes_; ++h) {
      if (cursors_[h].next.load() < cursors_[h].end) return false;
    }
    return true;
  }
  // No chunk is handed out after this; chunks already claimed still finish.
  void cancel() {
    for (int64_t h = 0; h < homes_; ++h) cursors_[h].next.store(cursors_[h].end);
  }
  // Marks `count` claimed chunks finished; true for exactly one call, the one
  // that finished the last chunk. A thread may report all the chunks it ran
  // at once (one write to the shared counter per job, not per chunk).
  bool finish(int64_t count = 1) { return done_.fetch_add(count) + count == nchunks_; }
  bool all_done() const { return done_.load() == nchunks_; }

 private:
  static constexpr int64_t kInlineHomes = 4;
  // One per home, 64 bytes apart: the owner's claims do not contend with the
  // other participants' (the 16 used bytes of two cursors never share a
  // cache line, whatever the object's alignment; no over-aligned allocation).
  struct Cursor {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
    char pad[48];
  };
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t nchunks_ = 0;
  int64_t homes_ = 0;
  Cursor inline_[kInlineHomes];
  std::vector<Cursor> more_;
  Cursor* cursors_ = inline_;
  std::atomic<int64_t> done_{0};
};

}  // namespace torchfrag
