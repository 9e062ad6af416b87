// Bookkeeping of async batches: envs that finish claim the next row of the
// next batch (so recv() hands out envs in the order they finished), batches
// live in a ring of sets reused once received.
//
// Only the counting lives here; the row memory and the wake-ups stay in Pool.
// Unit-tested on its own in csrc/tests/test_core.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace torchfrag {

class AsyncRing {
 public:
  // Where a finished env writes its result.
  struct Slot {
    int64_t batch;  // the batch's sequence number (0, 1, 2, ...)
    int64_t row;    // row within the batch
    int64_t set;    // ring index of the batch's memory
  };

  // Sets needed so that a batch handed out is not overwritten before the next
  // recv(): with at most num_envs envs in flight, rows can be claimed at most
  // ceil(num_envs / batch_size) batches past the oldest unreceived one; one
  // more is the batch the caller still reads, one more spare.
  static int64_t sets_needed(int64_t num_envs, int64_t batch_size) {
    return (num_envs + batch_size - 1) / batch_size + 2;
  }

  AsyncRing(int64_t batch_size, int64_t num_sets)
      : batch_size_(batch_size), num_sets_(num_sets),
        rows_done_(std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(num_sets))),
        completed_(std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(num_sets))) {
    if (batch_size < 1 || num_sets < 2) {
      throw std::invalid_argument("AsyncRing needs batch_size >= 1 and num_sets >= 2, got " +
                                  std::to_string(batch_size) + ", " + std::to_string(num_sets));
    }
    for (int64_t k = 0; k < num_sets; ++k) {
      rows_done_[k].store(0);
      completed_[k].store(-1);
    }
  }

  int64_t batch_size() const { return batch_size_; }
  int64_t num_sets() const { return num_sets_; }
  int64_t set_of(int64_t batch) const { return batch % num_sets_; }

  // A finished env takes the next row (any thread).
  Slot claim() {
    const int64_t s = next_slot_.fetch_add(1);
    const int64_t batch = s / batch_size_;
    return {batch, s % batch_size_, set_of(batch)};
  }
  // The row of `slot` is written; true for the call that completes its batch
  // (that caller then publishes it, under the lock recv() waits with).
  bool row_written(const Slot& slot) {
    return rows_done_[slot.set].fetch_add(1) + 1 == batch_size_;
  }
  void publish(int64_t batch) { completed_[set_of(batch)].store(batch); }
  bool ready(int64_t batch) const { return completed_[set_of(batch)].load() == batch; }
  // The consumer took `batch`: its set may be filled again.
  void consumed(int64_t batch) { rows_done_[set_of(batch)].store(0); }

 private:
  int64_t batch_size_;
  int64_t num_sets_;
  std::unique_ptr<std::atomic<int64_t>[]> rows_done_;
  std::unique_ptr<std::atomic<int64_t>[]> completed_;
  std::atomic<int64_t> next_slot_{0};
};

}  // namespace torchfrag
