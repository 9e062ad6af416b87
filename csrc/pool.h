// The async environment pool: many envs, a thread pool, batch buffers.
//
// Reading order: BatchBuffers (where results go), PoolConfig (what a pool is
// built from), Pool (the public operations), then the private machinery
// (jobs, workers, bookkeeping).
//
// Work is distributed per *chunk* of envs, not per env: a job (one step or
// send call) is cut into chunks that worker threads claim with one atomic
// increment each, and a chunk steps its envs back to back.  Cheap envs such
// as CartPole are stepped inline by the calling thread when waking a worker
// would cost more than the work itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/async_ring.h"
#include "core/chunk_scheduler.h"
#include "core/spin_wait.h"
#include "env.h"
#include "options.h"
#include "registry.h"
#include "spec.h"

namespace torchfrag {

// Raised when `recv(timeout)` runs out of time.
struct TimeoutError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raised when env code threw on a worker thread.
struct EnvError : std::runtime_error {
  EnvError(const std::string& msg, std::vector<int64_t> ids, std::vector<int64_t> batch)
      : std::runtime_error(msg), env_ids(std::move(ids)), batch_env_ids(std::move(batch)) {}
  std::vector<int64_t> env_ids;        // envs whose code threw (they need a reset)
  std::vector<int64_t> batch_env_ids;  // every env of the dropped batch (all idle now)
};

// Raised on any use of a closed pool.
struct ClosedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raised when a call is made while another thread's call on the same pool
// is running (see Pool for the rule).
struct BusyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raised when a wait was abandoned because the interrupt check asked for it
// (in Python: a signal handler raised, e.g. KeyboardInterrupt on Ctrl-C).
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How many times this process has been forked off its parent (the count is
// bumped in the child by a pthread_atfork handler). A pool made under another
// count belongs to an ancestor: its worker threads do not exist here.
uint64_t fork_generation();

// One output array of a batch: the batch dimension first, then the spec shape.
struct FieldSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // per-row shape
  size_t row_bytes;
};

// Preallocated output arrays for up to `capacity` rows.  Shared with Python
// (NumPy views hold a reference), so memory outlives the pool if needed.
// Aligned so that the members every stepping thread reads (field pointers)
// share no cache line with the shared_ptr count in front of the object, which
// the calling thread changes several times per call (make_shared puts the two
// side by side).
class alignas(64) BatchBuffers {
 public:
  // Fixed field order; infos follow.
  enum : size_t { kObs = 0, kReward, kTerminated, kTruncated, kEnvId, kElapsed, kFinalObs };

  BatchBuffers(const std::vector<FieldSpec>& fields, int64_t capacity, size_t first_info,
               size_t num_infos);

  uint8_t* field(size_t k) { return data_[k].get(); }
  const std::vector<FieldSpec>& fields() const { return fields_; }
  int64_t capacity() const { return capacity_; }

  Row row(int64_t r) {
    return Row(data_[kObs].get() + fields_[kObs].row_bytes * static_cast<size_t>(r),
               info_bases_.data(), info_row_bytes_.data(), r);
  }
  template <typename T>
  T* at(size_t k, int64_t r) {
    return reinterpret_cast<T*>(data_[k].get() + fields_[k].row_bytes * static_cast<size_t>(r));
  }

 private:
  struct FreeAligned {
    void operator()(uint8_t* p) const;
  };
  std::vector<FieldSpec> fields_;
  int64_t capacity_;
  std::vector<std::unique_ptr<uint8_t, FreeAligned>> data_;
  std::vector<uint8_t*> info_bases_;
  std::vector<size_t> info_row_bytes_;
};

enum class AutoReset { kNextStep, kSameStep };

struct PoolConfig {
  std::string env_id;
  int64_t num_envs = 1;
  int64_t batch_size = 0;   // 0: num_envs
  int64_t num_threads = 0;  // 0: min(num_envs, hardware threads)
  std::vector<uint64_t> seeds;  // one per env (already derived)
  AutoReset autoreset = AutoReset::kNextStep;
  std::map<std::string, OptionValue> options;
  // How threads wait for work and results (core/spin_wait.h); spin_us < 0:
  // the policy's default window.
  WaitPolicy wait_policy = WaitPolicy::kAdaptive;
  double spin_us = -1.0;
};

// Actions of a call, already converted to the pool's internal types and
// checked for finiteness by the caller (bindings).  `discrete` has n entries,
// `values` has n * action numel entries; exactly one is non-null for a step.
struct ActionBatch {
  const int64_t* discrete = nullptr;
  const double* values = nullptr;
};

// Threads: one pool serves one call at a time among reset/step/send/seed; a
// second such call made while one runs on another thread raises BusyError at
// once (it never waits, never steps an env twice). recv() may run on another
// thread than send() (producer/consumer), but only one recv() at a time.
// close() may be called from any thread: it stops the workers, then waits for
// every call in progress (sync, inline async, worker chunks) before freeing
// the envs; the waiting calls then raise ClosedError.
//
// Every blocking wait (a sync step waiting for workers, recv) wakes every
// kPollMs, counted from the start of the wait (the spin before the sleep
// included, see core/spin_wait.h), to run the interrupt check, so Python's
// signal handlers run while the GIL is released. An interrupted recv() leaves the pool as it was; an
// interrupted sync call closes the pool (envs may still be stepping on
// workers), and later calls say so.
class Pool {
 public:
  static constexpr int kPollMs = 20;

  explicit Pool(PoolConfig config);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  const EnvSpec& spec() const { return spec_; }
  const std::vector<FieldSpec>& fields() const { return fields_; }
  int64_t num_envs() const { return config_.num_envs; }
  int64_t batch_size() const { return config_.batch_size; }
  int64_t num_threads() const { return static_cast<int64_t>(workers_.size()); }
  AutoReset autoreset() const { return config_.autoreset; }
  WaitPolicy wait_policy() const { return config_.wait_policy; }
  double spin_us() const { return config_.spin_us; }  // resolved: the window in use
  size_t first_info_field() const { return first_info_; }

  // Sync: reset or step the given envs (all when `ids` is empty) and return
  // the batch; row j belongs to ids[j].  The returned buffers are reused two
  // sync calls later.
  std::shared_ptr<BatchBuffers> reset(const std::vector<int64_t>& ids);
  std::shared_ptr<BatchBuffers> step(const std::vector<int64_t>& ids, const ActionBatch& actions);

  // Async: start stepping (or resetting) envs; results arrive through recv()
  // in batches of batch_size rows, first finished first.
  void send(const std::vector<int64_t>& ids, const ActionBatch& actions, bool reset);
  // Wait for the next batch. timeout < 0: wait as long as it takes (it always
  // ends: recv refuses to wait for a batch that cannot fill up).
  std::shared_ptr<BatchBuffers> recv(double timeout_s);

  // New seeds for the given envs, used from their next reset.
  void seed(const std::vector<int64_t>& ids, const std::vector<uint64_t>& seeds);

  // What env `id` shows now (Env::render): for a frame of its current
  // state.  Refused while the env is in flight, before its first reset, and
  // for envs with nothing to show.  Takes the call lock like seed().
  // final: what it showed at the end of its last finished episode instead,
  // kept when keep_final_render(id, true) was set (a same_step pool resets a
  // finished env in the step that finished it, so the terminal state is gone
  // by the time the step returns).
  RenderData render(int64_t id, bool final = false);
  // Keep (or stop keeping) the render data of env `id`'s terminal states:
  // one Env::render per finished episode of that env, nothing otherwise.
  void keep_final_render(int64_t id, bool keep);

  int64_t in_flight() const;
  bool closed() const { return closed_.load() || forked(); }
  // Whether this object was made before a fork() of this process (it is a
  // copy in the child): nothing of it may be used or destroyed there.
  bool forked() const { return fork_generation() != generation_; }
  // Stop workers (finishing the chunk each is on), wait for the calls in
  // progress, free the envs. Idempotent; a no-op in a forked child.
  void close();

  // Called every kPollMs by blocking waits on the calling thread; returning
  // true abandons the wait with Interrupted. Set once, before any call.
  void set_interrupt_check(std::function<bool()> check) { interrupt_check_ = std::move(check); }

 private:
  // What the calling thread reads for every env of every call
  // (validate_for_step: started, broken) sits on another cache line than what
  // the thread stepping the env writes every step (rng, elapsed). On one
  // line, each sync call's checks pulled every worker-stepped env's line from
  // the worker's core before the job was even queued (a cross-core miss per
  // env on the call's critical path: CartpoleSwingup x8, 2 threads, 0.3-0.5
  // -> 0.13 us from the call's start to the enqueue), and the worker's next
  // step pulled it back.
  struct alignas(64) EnvSlot {
    // Written at resets, errors and async sends only; read every call.
    std::unique_ptr<Env> env;
    bool started = false;      // reset at least once
    bool broken = false;       // env code threw; must be reset
    bool in_flight = false;
    bool keep_final_render = false;  // see Pool::keep_final_render
    bool has_final_render = false;
    // Written by the stepping thread every step.
    alignas(64) Rng rng;
    int64_t elapsed = 0;
    bool needs_reset = false;  // next_step mode: finished, reset on next step
    RenderData final_render;
  };

  // Where one thread writes the rows of the envs it steps in a sync job that
  // other threads share (run_chunks): fields whose rows are smaller than a
  // cache line go to this thread's own memory first and are copied into the
  // batch once per job. Written in place, the rows of two threads' envs
  // share cache lines (8 envs: every reward, flag and env_id in one line),
  // and every env step's writes took those lines from the other core.
  // Aligned so that its per-chunk writes share no line with other members.
  struct alignas(64) Staging {
    std::vector<uint8_t> bytes;  // staged field k: `capacity` rows from offset[k]
    std::vector<size_t> offset;
    int64_t capacity = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // job rows staged, in staging order
    std::vector<uint8_t*> rows;  // one env's row pointers, one per field
  };

  struct Job {
    std::vector<int64_t> ids;
    bool reset = false;
    bool async = false;
    std::shared_ptr<BatchBuffers> sync_buf;  // sync jobs: row j <- ids[j]
    ChunkPlan plan;
    ChunkClaims claims;
    // How many workers join this job (each once); the others never see it: a
    // sync step on 2 cores with 2 workers wakes worker 0 only, where any idle
    // worker used to be woken and race the spinning one for it.
    int64_t worker_cap = 0;
    // Per worker: its home in `claims` if it joins, else -1 (set by enqueue:
    // sync jobs take workers 0 .. worker_cap-1, async ones idle workers first).
    std::vector<int64_t> home_of;
    uint64_t seq = 0;     // order of queueing (guarded by queue_mu_)
    int64_t passed = 0;   // workers that took or skipped it (guarded by queue_mu_)
    double est_ns = 0.0;  // estimated cost of one env (step or reset)
    // Slowest recent cost of one env, 0 before anything was measured: what the
    // calling thread of a sync call risks by stepping a chunk itself.
    double worst_ns = 0.0;
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    std::vector<std::pair<int64_t, std::string>> errors;  // guarded by mu
  };

  // The memory of one async batch of the ring (the counting is in ring_).
  struct AsyncSet {
    std::shared_ptr<BatchBuffers> buf;
    std::vector<std::pair<int64_t, std::string>> errors;  // guarded by ready_mu_
  };

  // try_lock of api_mu_: BusyError when another thread's call runs.
  std::unique_lock<std::mutex> lock_api(const char* what);
  // Sets the stop flags and wakes everyone; no joining, no waiting.
  void request_stop(const std::string& reason);
  bool interrupted();
  void check_open() const;
  std::vector<int64_t> resolve_ids(const std::vector<int64_t>& ids) const;
  void validate_for_step(const std::vector<int64_t>& ids, const ActionBatch& actions) const;
  void store_actions(const std::vector<int64_t>& ids, const ActionBatch& actions);
  std::shared_ptr<Job> make_job(std::vector<int64_t> ids, bool reset, bool async,
                                int64_t participants);
  // `ids` from take_all_ids() when `all_ids`: handed back once the job is done.
  std::shared_ptr<BatchBuffers> run_sync(std::vector<int64_t> ids, bool reset, bool all_ids);
  // 0 .. num_envs-1 for a sync call over every env (the common case), lent
  // rather than built: the same memory every call, which the workers' caches
  // keep, instead of a new vector written by the calling thread per call.
  std::vector<int64_t> take_all_ids();
  // `caller`: run on the thread that made the call, which may be interrupted
  // between chunks (sync jobs only). `home`: the range of chunks this thread
  // claims first (ChunkClaims).
  void run_chunks(Job& job, int64_t home, Staging& staging, bool caller = false);
  // Starts a sync job's staging with room for `rows` rows (grows, never shrinks).
  void prepare_staging(Staging& staging, int64_t rows) const;
  // staging.rows := the row pointers of `row` of `buf`, except the staged
  // fields' when staged_row >= 0: row `staged_row` of the staging.
  void point_rows(Staging& staging, BatchBuffers& buf, int64_t row, int64_t staged_row) const;
  // Copies the rows staged during a sync job into its batch.
  void flush_staged(Staging& staging, BatchBuffers& buf) const;
  // Folds a measured cost per env into the running estimate and the peak.
  void record_cost(bool reset, double ns_per_env, double peak_ns);
  // Queues a job for workers 0 .. job->worker_cap-1 and wakes them.
  void enqueue(const std::shared_ptr<Job>& job);
  void run_env(Job& job, int64_t env, Staging& staging);
  // Steps or resets one env into the row whose field k starts at rows[k];
  // returns an error message or "".
  std::string process(int64_t env, uint8_t* const* rows, bool reset);
  // same_step mode: final_obs and final_<info> := obs and infos of the row.
  void snapshot_final(uint8_t* const* rows) const;
  void finish_async_row(int64_t batch, const std::string& error, int64_t env);
  void worker_loop(int64_t w);
  EnvSlot& render_slot(int64_t id, const char* what);
  // Build envs on up to num_threads threads (ROM/model loading dominates pool start-up).
  void build_envs(const EnvFamily& family);
  static void raise_env_errors(const std::vector<std::pair<int64_t, std::string>>& errors,
                               std::vector<int64_t> batch_ids);

  PoolConfig config_;
  EnvSpec spec_;
  Options options_;
  std::vector<FieldSpec> fields_;
  size_t first_info_ = 0;
  int64_t cores_ = 1;  // CPUs this process may run on (affinity mask)
  size_t first_final_info_ = 0;  // same_step mode: final_<info> fields start here
  std::vector<char> staged_;      // per field: rows smaller than a cache line (Staging)
  std::vector<size_t> zero_row_bytes_;  // Row strides of 0: Row gets per-row pointers
  Staging caller_staging_;        // the calling thread's (one call at a time: api_mu_)
  int64_t max_episode_steps_ = 0;
  int64_t action_numel_ = 1;

  std::vector<EnvSlot> slots_;
  std::vector<int64_t> act_discrete_;
  std::vector<double> act_values_;
  std::vector<int64_t> all_ids_;  // see take_all_ids (guarded by api_mu_)

  // Sync buffers: a ring of two so the previous result stays readable.
  std::shared_ptr<BatchBuffers> sync_bufs_[2];
  int sync_turn_ = 0;

  // Async batches. An async env steps into its own row of `scratch_` and
  // claims a batch row only when it has finished, so recv() hands out envs in
  // the order they finished, not the order they started.
  std::shared_ptr<BatchBuffers> scratch_;
  std::vector<std::unique_ptr<AsyncSet>> async_sets_;
  std::unique_ptr<AsyncRing> ring_;  // completion published under ready_mu_
  int64_t recv_batch_ = 0;   // guarded by recv_mu_
  std::mutex recv_mu_;        // one recv() at a time, so batches are handed out in order
  mutable std::mutex ready_mu_;
  std::condition_variable ready_cv_;

  // Bookkeeping of in-flight envs, serialised with the public calls.
  mutable std::mutex state_mu_;
  int64_t in_flight_ = 0;
  std::mutex api_mu_;  // one sync call at a time; close waits for it

  // Spinning before each kind of sleep (see core/spin_wait.h): a sync caller
  // for its chunks, recv() for its batch (workers: one SpinWait each, in
  // WorkerState, so one worker's failed spins do not stop another's).
  std::unique_ptr<SpinWait> spin_sync_;
  std::unique_ptr<SpinWait> spin_recv_;

  // Workers. Each waits on its own condition variable (under queue_mu_) for
  // jobs meant for it, so a job wakes exactly the workers that may join it.
  struct WorkerState {
    WorkerState(WaitPolicy policy, double spin_us) : spin(policy, spin_us) {}
    SpinWait spin;
    std::condition_variable cv;
    // Queued jobs this worker may join and has not taken or skipped yet:
    // readable without the lock, for the spin.
    std::atomic<int64_t> pending{0};
    std::atomic<bool> busy{false};  // running chunks (async jobs prefer idle workers)
    Staging staging;  // this worker's rows (only it touches them)
    uint64_t next_seq = 0;  // first job seq it has not looked at (guarded by queue_mu_)
  };
  std::vector<std::unique_ptr<WorkerState>> wstate_;
  std::vector<std::thread> workers_;
  std::mutex queue_mu_;
  std::deque<std::shared_ptr<Job>> queue_;
  uint64_t next_job_seq_ = 0;  // guarded by queue_mu_
  uint64_t async_turn_ = 0;    // rotates the first worker tried for async jobs (api_mu_)
  bool stop_ = false;  // guarded by queue_mu_
  // Read by every spinning worker and every call, written once at close: on
  // a cache line of their own, so that the queue's lock and deque (written by
  // every enqueue and every worker taking a job) do not pull the line away
  // from a spinning worker on each call.
  alignas(64) std::atomic<bool> stopping_{false};
  std::atomic<bool> closed_{false};
  alignas(64) mutable std::mutex reason_mu_;
  std::string close_reason_;  // guarded by reason_mu_
  std::mutex join_mu_;        // one closer joins the workers
  uint64_t generation_ = fork_generation();
  std::function<bool()> interrupt_check_;

  // Running estimates of the cost of one env step / reset, to size chunks and
  // to decide what runs inline. Kept apart: a cheap reset says nothing about
  // the step (an async send must not run a slow env inline).
  // Written by every thread that stepped envs, once per job: a line of their
  // own, away from what the threads only read (interrupt_check_, the flags).
  alignas(64) std::atomic<double> ns_per_step_{0.0};
  std::atomic<double> ns_per_reset_{0.0};
  // Slowest recent per-env cost: a peak that decays by 10% a chunk, so one slow
  // step keeps the caller out of env code for a while, and a preempted chunk of
  // cheap envs is soon forgotten.
  std::atomic<double> peak_ns_per_step_{0.0};
  std::atomic<double> peak_ns_per_reset_{0.0};
};

}  // namespace torchfrag
