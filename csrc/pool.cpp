#include "pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <system_error>

#include <pthread.h>
#include <sched.h>

namespace torchfrag {

namespace {

using Clock = std::chrono::steady_clock;

// Work below this many nanoseconds runs on the calling thread: waking a
// sleeping worker costs several microseconds, more than stepping a few
// hundred CartPoles.
constexpr double kInlineNs = 20000.0;
// Target duration of one chunk when a job is split across threads.
constexpr double kChunkNs = 10000.0;
// The calling thread of a sync call runs chunks only below this cost, so
// that it gets back to its interrupt check (Ctrl-C) within a few ms.
constexpr double kCallerChunkNs = 5.0e6;
// Assumed cost of an env step before anything has been measured.
constexpr double kUnknownNs = 1.0e5;
std::string join_ids(const std::vector<int64_t>& ids, size_t limit = 16) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < limit; ++i) {
    s += (i ? ", " : "") + std::to_string(ids[i]);
  }
  if (ids.size() > limit) s += ", ...";
  return s;
}

// CPUs this process may run on (taskset, cgroup cpusets), else the hardware's.
int64_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

std::atomic<uint64_t> g_fork_generation{0};

// Registered once per process image (the handler is inherited by children).
const bool g_atfork_registered = [] {
  pthread_atfork(nullptr, nullptr, [] { g_fork_generation.fetch_add(1); });
  return true;
}();

}  // namespace

uint64_t fork_generation() {
  (void)g_atfork_registered;
  return g_fork_generation.load(std::memory_order_relaxed);
}

void BatchBuffers::FreeAligned::operator()(uint8_t* p) const { std::free(p); }

BatchBuffers::BatchBuffers(const std::vector<FieldSpec>& fields, int64_t capacity,
                           size_t first_info, size_t num_infos)
    : fields_(fields), capacity_(capacity) {
  for (const auto& f : fields_) {
    // 64-byte alignment keeps rows of different threads apart when rows are
    // cache-line sized, and suits SIMD consumers.
    size_t bytes = std::max<size_t>(64, f.row_bytes * static_cast<size_t>(capacity));
    bytes = (bytes + 63) / 64 * 64;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.emplace_back(p);
  }
  for (size_t k = 0; k < num_infos; ++k) {
    info_bases_.push_back(data_[first_info + k].get());
    info_row_bytes_.push_back(fields_[first_info + k].row_bytes);
  }
}

Pool::Pool(PoolConfig config) : config_(std::move(config)) {
  if (config_.num_envs <= 0) {
    throw std::invalid_argument("num_envs must be a positive integer, got " +
                                std::to_string(config_.num_envs));
  }
  if (config_.batch_size == 0) config_.batch_size = config_.num_envs;
  if (config_.batch_size < 0 || config_.batch_size > config_.num_envs) {
    throw std::invalid_argument("batch_size must be in [1, num_envs=" +
                                std::to_string(config_.num_envs) + "], got " +
                                std::to_string(config_.batch_size));
  }
  if (config_.num_threads < 0) {
    throw std::invalid_argument("num_threads must be >= 0 (0 picks a default), got " +
                                std::to_string(config_.num_threads));
  }
  cores_ = usable_cores();
  if (config_.num_threads == 0) {
    const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
    config_.num_threads = std::min<int64_t>(config_.num_envs, hw);
  }
  if (static_cast<int64_t>(config_.seeds.size()) != config_.num_envs) {
    throw std::invalid_argument("expected one seed per env");
  }
  config_.spin_us = resolve_spin_us(config_.wait_policy, config_.spin_us);
  spin_sync_ = std::make_unique<SpinWait>(config_.wait_policy, config_.spin_us);
  spin_recv_ = std::make_unique<SpinWait>(config_.wait_policy, config_.spin_us);

  auto family = Registry::instance().family(config_.env_id);
  EnvSpec base = family->spec(config_.env_id, nullptr);
  std::vector<OptionSpec> declared = base.options;
  const bool has_max =
      std::any_of(declared.begin(), declared.end(),
                  [](const OptionSpec& o) { return o.name == "max_episode_steps"; });
  if (!has_max) {
    declared.push_back(opt_int("max_episode_steps", base.max_episode_steps,
                               "episode length after which `truncated` is set (0: no limit)"));
  }
  options_ = Options::resolve(declared, config_.options, config_.num_envs);
  spec_ = family->spec(config_.env_id, &options_);
  spec_.id = config_.env_id;
  spec_.options = declared;
  max_episode_steps_ = static_cast<int64_t>(options_.num("max_episode_steps"));
  if (max_episode_steps_ < 0) {
    throw std::invalid_argument("max_episode_steps must be >= 0 (0: no limit), got " +
                                std::to_string(max_episode_steps_));
  }
  spec_.max_episode_steps = max_episode_steps_;
  action_numel_ = spec_.action.numel();

  // Output fields: fixed ones first, infos last.
  fields_.push_back({"obs", spec_.obs.dtype, spec_.obs.shape, spec_.obs.nbytes()});
  fields_.push_back({"reward", DType::kFloat64, {}, 8});
  fields_.push_back({"terminated", DType::kBool, {}, 1});
  fields_.push_back({"truncated", DType::kBool, {}, 1});
  fields_.push_back({"env_id", DType::kInt32, {}, 4});
  fields_.push_back({"elapsed_step", DType::kInt32, {}, 4});
  if (config_.autoreset == AutoReset::kSameStep) {
    fields_.push_back({"final_obs", spec_.obs.dtype, spec_.obs.shape, spec_.obs.nbytes()});
  }
  first_info_ = fields_.size();
  for (const auto& info : spec_.infos) {
    fields_.push_back({info.name, info.dtype, info.shape, info.nbytes()});
  }
  first_final_info_ = fields_.size();
  if (config_.autoreset == AutoReset::kSameStep) {
    // The infos of the step that ended an episode, before the reset overwrote them.
    for (const auto& info : spec_.infos) {
      fields_.push_back({"final_" + info.name, info.dtype, info.shape, info.nbytes()});
    }
  }
  const size_t num_infos = spec_.infos.size();
  for (const auto& f : fields_) staged_.push_back(f.row_bytes < 64 ? 1 : 0);
  zero_row_bytes_.assign(std::max<size_t>(num_infos, 1), 0);

  slots_.resize(static_cast<size_t>(config_.num_envs));
  for (int64_t i = 0; i < config_.num_envs; ++i) slots_[i].rng.reseed(config_.seeds[i]);
  build_envs(*family);
  act_discrete_.assign(static_cast<size_t>(config_.num_envs), 0);
  act_values_.assign(static_cast<size_t>(config_.num_envs * action_numel_), 0.0);

  for (auto& b : sync_bufs_) {
    b = std::make_shared<BatchBuffers>(fields_, config_.num_envs, first_info_, num_infos);
  }
  scratch_ = std::make_shared<BatchBuffers>(fields_, config_.num_envs, first_info_, num_infos);
  // Enough async sets that a batch handed to Python is not overwritten before
  // the next recv: at most num_envs rows can be claimed past the oldest
  // unreceived batch.
  const int64_t ring = AsyncRing::sets_needed(config_.num_envs, config_.batch_size);
  ring_ = std::make_unique<AsyncRing>(config_.batch_size, ring);
  for (int64_t k = 0; k < ring; ++k) {
    auto set = std::make_unique<AsyncSet>();
    set->buf = std::make_shared<BatchBuffers>(fields_, config_.batch_size, first_info_, num_infos);
    async_sets_.push_back(std::move(set));
  }

  for (int64_t t = 0; t < config_.num_threads; ++t) {
    wstate_.push_back(std::make_unique<WorkerState>(config_.wait_policy, config_.spin_us));
  }
  for (int64_t t = 0; t < config_.num_threads; ++t) {
    try {
      workers_.emplace_back([this, t] { worker_loop(t); });
    } catch (const std::system_error& e) {
      // No destructor runs for a half-built object: stop and join the
      // workers already started before their condition variable goes away.
      close();
      throw std::runtime_error("could not start worker thread " + std::to_string(t + 1) +
                               " of num_threads=" + std::to_string(config_.num_threads) + " (" +
                               e.what() + "); ask for fewer threads");
    }
  }
}

Pool::~Pool() { close(); }

void Pool::build_envs(const EnvFamily& family) {
  const int64_t n = config_.num_envs;
  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;
  auto build = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        EnvOptions view(options_, i);
        slots_[i].env = family.make(config_.env_id, spec_, view);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next.store(n);  // stop everyone early
        return;
      }
    }
  };
  {
    // Joins on scope exit, also when starting a thread throws.
    struct Joiner {
      std::vector<std::thread> threads;
      ~Joiner() {
        for (auto& t : threads) t.join();
      }
    } helpers;
    const int64_t extra = std::min(config_.num_threads, n) - 1;
    for (int64_t t = 0; t < extra; ++t) {
      try {
        helpers.threads.emplace_back(build);
      } catch (const std::system_error&) {
        break;  // fewer builders (e.g. thread limit reached): the others do the work
      }
    }
    build();
  }
  if (error) std::rethrow_exception(error);
}

void Pool::request_stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    if (close_reason_.empty()) close_reason_ = reason;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_ = true;
    stopping_ = true;
    queue_.clear();
  }
  closed_.store(true);
  for (auto& w : wstate_) w->cv.notify_all();
  {
    // Wake any recv() so it can report the closed pool.
    std::lock_guard<std::mutex> lock(ready_mu_);
  }
  ready_cv_.notify_all();
}

void Pool::close() {
  // A copy made by fork(): the workers are not ours and the locks may be
  // held by threads of the parent. Touch nothing.
  if (forked()) return;
  request_stop("the pool is closed; make a new one");
  {
    std::lock_guard<std::mutex> lock(join_mu_);
    for (auto& w : workers_) {
      if (w.joinable()) w.join();
    }
  }
  // A sync call or an inline send running on another thread finishes its
  // own chunks; wait for it before the envs go away.
  std::lock_guard<std::mutex> api(api_mu_);
  for (auto& s : slots_) s.env.reset();
}

void Pool::check_open() const {
  if (forked()) {
    throw ClosedError(
        "this pool was made in the parent process before fork(); its worker threads do not "
        "exist in this child: make a new pool here");
  }
  if (closed_.load()) {
    std::lock_guard<std::mutex> lock(reason_mu_);
    throw ClosedError(close_reason_.empty() ? "the pool is closed; make a new one"
                                            : close_reason_);
  }
}

std::unique_lock<std::mutex> Pool::lock_api(const char* what) {
  check_open();
  std::unique_lock<std::mutex> lock(api_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    check_open();  // a close() in progress holds the lock too
    throw BusyError(std::string("the pool is in use by another thread: ") + what +
                    "() was called while a reset/step/send/seed call of another thread is "
                    "running; a pool serves one such call at a time (use one pool per thread, "
                    "or a lock around the calls)");
  }
  return lock;
}

bool Pool::interrupted() { return interrupt_check_ && interrupt_check_(); }

int64_t Pool::in_flight() const {
  if (forked()) return 0;  // the lock may be held by a thread of the parent
  std::lock_guard<std::mutex> lock(state_mu_);
  return in_flight_;
}

std::vector<int64_t> Pool::resolve_ids(const std::vector<int64_t>& ids) const {
  const int64_t n = config_.num_envs;
  if (ids.empty()) {
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  if (static_cast<int64_t>(ids.size()) > n) {
    throw std::invalid_argument("got " + std::to_string(ids.size()) + " env ids for a pool of " +
                                std::to_string(n) + " envs");
  }
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (int64_t id : ids) {
    if (id < 0 || id >= n) {
      throw std::invalid_argument("env id " + std::to_string(id) + " is out of range [0, " +
                                  std::to_string(n) + ")");
    }
    if (seen[id]) throw std::invalid_argument("env id " + std::to_string(id) + " appears twice");
    seen[id] = 1;
  }
  return ids;
}

void Pool::validate_for_step(const std::vector<int64_t>& ids, const ActionBatch& actions) const {
  if (spec_.action.discrete) {
    if (actions.discrete == nullptr) throw std::invalid_argument("missing discrete actions");
    for (size_t j = 0; j < ids.size(); ++j) {
      const int64_t a = actions.discrete[j];
      if (a < 0 || a >= spec_.action.n) {
        throw std::invalid_argument("action " + std::to_string(a) + " for env " +
                                    std::to_string(ids[j]) + " is out of range [0, " +
                                    std::to_string(spec_.action.n) + ")");
      }
    }
  } else if (actions.values == nullptr) {
    throw std::invalid_argument("missing continuous actions");
  }
  for (int64_t id : ids) {
    const EnvSlot& s = slots_[id];
    if (!s.started) {
      throw std::invalid_argument("env " + std::to_string(id) +
                                  " has not been reset; call reset() (or async_reset()) first");
    }
    if (s.broken) {
      throw std::invalid_argument("env " + std::to_string(id) +
                                  " raised in an earlier step; reset it before stepping it again");
    }
  }
}

void Pool::store_actions(const std::vector<int64_t>& ids, const ActionBatch& actions) {
  if (spec_.action.discrete) {
    for (size_t j = 0; j < ids.size(); ++j) act_discrete_[ids[j]] = actions.discrete[j];
  } else {
    const size_t k = static_cast<size_t>(action_numel_);
    for (size_t j = 0; j < ids.size(); ++j) {
      std::memcpy(&act_values_[ids[j] * k], actions.values + j * k, k * sizeof(double));
    }
  }
}

std::shared_ptr<Pool::Job> Pool::make_job(std::vector<int64_t> ids, bool reset, bool async,
                                          int64_t participants) {
  auto job = std::make_shared<Job>();
  const int64_t n = static_cast<int64_t>(ids.size());
  job->ids = std::move(ids);
  job->reset = reset;
  job->async = async;
  double est = (reset ? ns_per_reset_ : ns_per_step_).load(std::memory_order_relaxed);
  if (est <= 0.0) est = kUnknownNs;
  job->est_ns = est;
  job->worst_ns = (reset ? peak_ns_per_reset_ : peak_ns_per_step_).load(std::memory_order_relaxed);
  job->plan = plan_chunks(n, est, participants, !workers_.empty(), kInlineNs, kChunkNs);
  // One home range per participant that may claim chunks (ChunkClaims).
  job->claims.reset(n, job->plan, participants);
  job->worker_cap = std::min<int64_t>(static_cast<int64_t>(workers_.size()), job->claims.homes());
  return job;
}

void Pool::enqueue(const std::shared_ptr<Job>& job) {
  const int64_t nworkers = static_cast<int64_t>(workers_.size());
  const int64_t cap = std::min<int64_t>(job->worker_cap, nworkers);
  job->home_of.assign(static_cast<size_t>(nworkers), -1);
  if (!job->async) {
    // The same workers, with the same homes, every call (chunk affinity).
    for (int64_t w = 0; w < cap; ++w) job->home_of[w] = w;
  } else {
    // Async sends may be many small jobs while earlier ones still run: give
    // each to idle workers first, starting from a rotating one, so that a
    // send of 2 envs on 16 workers does not wait for busy workers 0 and 1.
    const int64_t start = static_cast<int64_t>(async_turn_++ % static_cast<uint64_t>(nworkers));
    int64_t given = 0;
    for (int pass = 0; pass < 2 && given < cap; ++pass) {
      for (int64_t i = 0; i < nworkers && given < cap; ++i) {
        const int64_t w = (start + i) % nworkers;
        if (job->home_of[w] >= 0) continue;
        if (pass == 0 && wstate_[w]->busy.load(std::memory_order_relaxed)) continue;
        job->home_of[w] = given++;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stop_) throw ClosedError("the pool is closed; make a new one");
    job->seq = next_job_seq_++;
    queue_.push_back(job);
    for (int64_t w = 0; w < nworkers; ++w) {
      if (job->home_of[w] >= 0) wstate_[w]->pending.fetch_add(1);
    }
  }
  // A worker that is spinning sees `pending` without this; the notify of a
  // condition variable nobody waits on is a user-space check.
  for (int64_t w = 0; w < nworkers; ++w) {
    if (job->home_of[w] >= 0) wstate_[w]->cv.notify_one();
  }
}

std::shared_ptr<BatchBuffers> Pool::reset(const std::vector<int64_t>& ids_in) {
  auto api = lock_api("reset");
  const bool all = ids_in.empty();
  std::vector<int64_t> ids = all ? take_all_ids() : resolve_ids(ids_in);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (in_flight_ > 0) {
      throw std::runtime_error("cannot reset() while " + std::to_string(in_flight_) +
                               " envs are in flight; recv() their results first");
    }
  }
  return run_sync(std::move(ids), true, all);
}

std::shared_ptr<BatchBuffers> Pool::step(const std::vector<int64_t>& ids_in,
                                         const ActionBatch& actions) {
  auto api = lock_api("step");
  const bool all = ids_in.empty();
  std::vector<int64_t> ids = all ? take_all_ids() : resolve_ids(ids_in);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (in_flight_ > 0) {
      throw std::runtime_error("cannot step() while " + std::to_string(in_flight_) +
                               " envs are in flight; recv() their results first");
    }
    validate_for_step(ids, actions);
  }
  store_actions(ids, actions);
  return run_sync(std::move(ids), false, all);
}

std::vector<int64_t> Pool::take_all_ids() {
  if (static_cast<int64_t>(all_ids_.size()) != config_.num_envs) all_ids_ = resolve_ids({});
  return std::move(all_ids_);
}

std::shared_ptr<BatchBuffers> Pool::run_sync(std::vector<int64_t> ids, bool reset, bool all_ids) {
  auto buf = sync_bufs_[sync_turn_];
  sync_turn_ ^= 1;
  // The caller steps chunks as one more thread, unless that would make more
  // stepping threads than cores: then it takes one worker's place, so that
  // num_threads threads step (HumanoidRun, 8 envs, num_threads=2 on 2 cores:
  // caller and two workers time-shared the cores, and whoever waited for a
  // descheduled thread's env spun on a core that thread needed: 81% of the
  // limit loop's rate).  Blocking envs still get num_threads steppers.
  const int64_t workers = static_cast<int64_t>(workers_.size());
  const int64_t participants =
      workers == 0 ? 1 : std::max(workers, std::min(workers + 1, cores_));
  auto job = make_job(std::move(ids), reset, false, participants);
  job->sync_buf = buf;
  // The caller steps chunks too, unless one chunk could keep it from its
  // interrupt checks for long (a slow env, or envs never measured yet: the
  // first step of 20 s envs would hold Ctrl-C for 20 s): then it only waits.
  // Without workers nobody else can run them.
  const bool caller_helps =
      workers_.empty() ||
      (job->worst_ns > 0.0 &&
       static_cast<double>(job->plan.chunk) * job->worst_ns < kCallerChunkNs);
  // Homes (ChunkClaims): workers 0 .. worker_cap-1 own homes 0 .. worker_cap-1
  // and a helping caller the last one, the same every call. A job the caller
  // only waits for has one home per worker.
  if (!caller_helps) job->claims.reset(static_cast<int64_t>(job->ids.size()), job->plan, workers);
  job->worker_cap = std::min<int64_t>(
      caller_helps ? participants - 1 : workers, job->claims.homes() - (caller_helps ? 1 : 0));
  if (job->worker_cap > 0) enqueue(job);
  if (caller_helps) run_chunks(*job, job->claims.homes() - 1, caller_staging_, true);
  // The first interrupt check comes kPollMs after the spin began, not after
  // it ended, so a spin window never adds to the Ctrl-C latency.
  auto next_poll = Clock::now() + std::chrono::milliseconds(kPollMs);
  // A spin that saw every chunk done needs no more: each thread copies its
  // rows and records its errors before it counts its chunks done. Only a wait
  // that goes to sleep needs `finished`, set under job->mu after that count;
  // taking the lock after a successful spin could find it not yet set (the
  // last thread between its count and the lock) and sleep for a futex wake-up.
  const bool done = spin_sync_->spin([&] { return job->claims.all_done(); });
  if (!done) {
    std::unique_lock<std::mutex> lock(job->mu);
    while (!job->cv.wait_until(lock, next_poll, [&] { return job->finished; })) {
      next_poll = Clock::now() + std::chrono::milliseconds(kPollMs);
      lock.unlock();
      if (interrupted()) {
        // Workers are still stepping envs of this job: the pool cannot be
        // handed back in a known state, so it is closed (freed once they finish).
        request_stop(std::string("the pool was closed because a ") + (reset ? "reset" : "step") +
                     "() waiting for its envs was interrupted; make a new one");
        throw Interrupted("interrupted");
      }
      lock.lock();
    }
  }
  if (!job->errors.empty()) {
    std::lock_guard<std::mutex> lock(state_mu_);
    for (const auto& e : job->errors) slots_[e.first].broken = true;
    raise_env_errors(job->errors, job->ids);
  }
  // Every chunk is done: no thread reads the ids any more.
  if (all_ids) all_ids_ = std::move(job->ids);
  return buf;
}

void Pool::send(const std::vector<int64_t>& ids_in, const ActionBatch& actions, bool reset) {
  // Held through the inline run too: close() waits for it before freeing envs.
  auto api = lock_api(reset ? "async_reset" : "send");
  std::vector<int64_t> ids = resolve_ids(ids_in);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    for (int64_t id : ids) {
      if (slots_[id].in_flight) {
        throw std::invalid_argument("env " + std::to_string(id) +
                                    " is already in flight; recv() its result before sending "
                                    "it again");
      }
    }
    if (!reset) validate_for_step(ids, actions);
    if (!reset) store_actions(ids, actions);
    for (int64_t id : ids) slots_[id].in_flight = true;
    in_flight_ += static_cast<int64_t>(ids.size());
  }
  auto job = make_job(std::move(ids), reset, true, static_cast<int64_t>(workers_.size()));
  if (job->plan.run_inline) {
    // Cheap work (or no worker threads): do it now rather than pay for a
    // thread hand-off; the results wait in their batch for recv().
    run_chunks(*job, 0, caller_staging_);
    return;
  }
  enqueue(job);
}

std::shared_ptr<BatchBuffers> Pool::recv(double timeout_s) {
  check_open();
  std::unique_lock<std::mutex> one_at_a_time(recv_mu_, std::try_to_lock);
  if (!one_at_a_time.owns_lock()) {
    throw BusyError(
        "the pool is in use by another thread: recv() was called while another thread's recv() "
        "is waiting; one recv() at a time per pool");
  }
  const int64_t bs = config_.batch_size;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (in_flight_ == 0) {
      throw std::runtime_error("recv() called with no envs in flight; send() actions first");
    }
    if (in_flight_ < bs) {
      throw std::runtime_error("recv() needs batch_size=" + std::to_string(bs) +
                               " results but only " + std::to_string(in_flight_) +
                               " envs are in flight; send() more envs first");
    }
  }
  const int64_t batch = recv_batch_;
  AsyncSet& set = *async_sets_[ring_->set_of(batch)];
  std::vector<std::pair<int64_t, std::string>> errors;
  {
    auto ready = [&] { return ring_->ready(batch) || closed_.load(); };
    // Beyond this a timeout means "no limit" (and a deadline would overflow the clock).
    constexpr double kForeverS = 1.0e8;
    const bool forever = timeout_s < 0 || !(timeout_s < kForeverS);
    // Both counted from before the spin: spinning is part of the wait.
    const auto deadline =
        forever ? Clock::time_point::max()
                : Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
    auto next_poll = Clock::now() + std::chrono::milliseconds(kPollMs);  // as in run_sync
    spin_recv_->spin(ready);
    std::unique_lock<std::mutex> lock(ready_mu_);
    for (;;) {
      const auto slice = std::min(deadline, next_poll);
      if (ready_cv_.wait_until(lock, slice, ready)) break;
      next_poll = Clock::now() + std::chrono::milliseconds(kPollMs);
      if (!forever && Clock::now() >= deadline) {
        throw TimeoutError("recv() timed out after " + format_number(timeout_s) +
                           " s waiting for " + std::to_string(bs) + " results");
      }
      lock.unlock();
      // Nothing was consumed: the pool stays usable after the interrupt.
      if (interrupted()) throw Interrupted("interrupted");
      lock.lock();
    }
    check_open();
    errors.swap(set.errors);
    ring_->consumed(batch);
  }
  recv_batch_ = batch + 1;
  const int32_t* env_ids = set.buf->at<int32_t>(BatchBuffers::kEnvId, 0);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    for (int64_t r = 0; r < bs; ++r) slots_[env_ids[r]].in_flight = false;
    in_flight_ -= bs;
    for (const auto& e : errors) slots_[e.first].broken = true;
  }
  if (!errors.empty()) raise_env_errors(errors, std::vector<int64_t>(env_ids, env_ids + bs));
  return set.buf;
}

void Pool::seed(const std::vector<int64_t>& ids_in, const std::vector<uint64_t>& seeds) {
  auto api = lock_api("seed");
  std::vector<int64_t> ids = resolve_ids(ids_in);
  if (seeds.size() != ids.size()) {
    throw std::invalid_argument("got " + std::to_string(seeds.size()) + " seeds for " +
                                std::to_string(ids.size()) + " envs");
  }
  std::lock_guard<std::mutex> lock(state_mu_);
  for (size_t j = 0; j < ids.size(); ++j) {
    if (slots_[ids[j]].in_flight) {
      throw std::runtime_error("cannot seed env " + std::to_string(ids[j]) +
                               " while it is in flight");
    }
  }
  for (size_t j = 0; j < ids.size(); ++j) slots_[ids[j]].rng.reseed(seeds[j]);
}

Pool::EnvSlot& Pool::render_slot(int64_t id, const char* what) {
  const int64_t n = config_.num_envs;
  if (id < 0 || id >= n) {
    throw std::invalid_argument("env_index " + std::to_string(id) + " is out of range [0, " +
                                std::to_string(n) + ")");
  }
  EnvSlot& s = slots_[id];
  std::lock_guard<std::mutex> lock(state_mu_);
  if (s.in_flight) {
    throw std::runtime_error(std::string("cannot ") + what + " env " + std::to_string(id) +
                             " while it is in flight: recv() its result first");
  }
  return s;
}

RenderData Pool::render(int64_t id, bool final) {
  auto api = lock_api("render");
  // No send can start while the call lock is held, so the env stays idle.
  EnvSlot& s = render_slot(id, "render");
  if (final) {
    if (!s.keep_final_render) {
      throw std::runtime_error("render(final=True) of env " + std::to_string(id) +
                               " needs keep_final_render(" + std::to_string(id) +
                               ") before its episodes end");
    }
    if (!s.has_final_render) {
      throw std::runtime_error("env " + std::to_string(id) +
                               " has not finished an episode since keep_final_render()");
    }
    return s.final_render;
  }
  if (!s.started) {
    throw std::runtime_error("env " + std::to_string(id) +
                             " has not been reset yet: call reset() before render()");
  }
  RenderData out;
  if (!s.env->render(&out)) {
    throw std::invalid_argument(spec_.id + " has nothing to render (render() supports classic "
                                "control, Atari and MuJoCo envs)");
  }
  return out;
}

void Pool::keep_final_render(int64_t id, bool keep) {
  auto api = lock_api("keep_final_render");
  EnvSlot& s = render_slot(id, "keep_final_render of");
  s.keep_final_render = keep;
  s.has_final_render = false;
  s.final_render = RenderData{};
}

void Pool::raise_env_errors(const std::vector<std::pair<int64_t, std::string>>& errors,
                            std::vector<int64_t> batch_ids) {
  std::vector<int64_t> ids;
  std::string msg;
  for (const auto& e : errors) {
    ids.push_back(e.first);
    if (msg.empty()) msg = "env " + std::to_string(e.first) + " raised: " + e.second;
  }
  if (errors.size() > 1) msg += " (and " + std::to_string(errors.size() - 1) + " more envs)";
  msg += "; the failed envs [" + join_ids(ids) +
         "] must be reset before they are stepped again, the batch holding them is dropped";
  throw EnvError(msg, ids, std::move(batch_ids));
}

void Pool::worker_loop(int64_t w) {
  WorkerState& me = *wstate_[w];
  const int64_t nworkers = static_cast<int64_t>(wstate_.size());
  auto cap = [&](const Job& j) { return std::min(j.worker_cap, nworkers); };
  for (;;) {
    me.spin.spin([&] {
      return me.pending.load(std::memory_order_relaxed) > 0 ||
             stopping_.load(std::memory_order_relaxed);
    });
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      me.cv.wait(lock, [&] { return stop_ || me.pending.load() > 0; });
      if (stop_) return;
      // The oldest job meant for this worker that it has not looked at: one
      // exists for every count of `pending` (both change under queue_mu_).
      for (const auto& j : queue_) {
        if (j->seq >= me.next_seq && j->home_of[w] >= 0) {
          job = j;
          break;
        }
      }
      if (!job) {  // cannot happen; never spin on a count with no job behind it
        me.pending.store(0);
        continue;
      }
      me.next_seq = job->seq + 1;
      me.pending.fetch_sub(1);
      ++job->passed;
      // A job leaves the queue once every worker it was meant for passed it.
      while (!queue_.empty() && queue_.front()->passed >= cap(*queue_.front())) {
        queue_.pop_front();
      }
    }
    // Every chunk already claimed (the caller or a sibling stole them): skip.
    if (job->claims.all_claimed()) continue;
    me.busy.store(true, std::memory_order_relaxed);
    run_chunks(*job, job->home_of[w], me.staging);
    me.busy.store(false, std::memory_order_relaxed);
  }
}

void Pool::record_cost(bool reset, double ns_per_env, double peak_ns) {
  auto& estimate = reset ? ns_per_reset_ : ns_per_step_;
  const double old = estimate.load(std::memory_order_relaxed);
  estimate.store(old <= 0.0 ? ns_per_env : 0.8 * old + 0.2 * ns_per_env,
                 std::memory_order_relaxed);
  auto& peak = reset ? peak_ns_per_reset_ : peak_ns_per_step_;
  peak.store(std::max(peak_ns, 0.9 * peak.load(std::memory_order_relaxed)),
             std::memory_order_relaxed);
}

void Pool::prepare_staging(Staging& st, int64_t rows) const {
  st.ranges.clear();
  st.rows.resize(fields_.size());
  if (st.capacity >= rows && st.offset.size() == fields_.size()) return;
  // Grows only: the largest share one thread has stepped so far (<= num_envs).
  st.capacity = std::max<int64_t>(rows, 1);
  st.offset.assign(fields_.size(), 0);
  size_t total = 0;
  for (size_t k = 0; k < fields_.size(); ++k) {
    if (!staged_[k]) continue;
    st.offset[k] = total;
    total += (fields_[k].row_bytes * static_cast<size_t>(st.capacity) + 63) / 64 * 64;
  }
  st.bytes.assign(total + 64, 0);
}

void Pool::point_rows(Staging& st, BatchBuffers& buf, int64_t row, int64_t staged_row) const {
  for (size_t k = 0; k < fields_.size(); ++k) {
    const size_t rb = fields_[k].row_bytes;
    st.rows[k] = staged_row >= 0 && staged_[k]
                     ? st.bytes.data() + st.offset[k] + rb * static_cast<size_t>(staged_row)
                     : buf.field(k) + rb * static_cast<size_t>(row);
  }
}

void Pool::flush_staged(Staging& st, BatchBuffers& buf) const {
  int64_t from = 0;  // staged row of the range's first row
  for (const auto& r : st.ranges) {
    const size_t count = static_cast<size_t>(r.second - r.first);
    for (size_t k = 0; k < fields_.size(); ++k) {
      if (!staged_[k]) continue;
      const size_t rb = fields_[k].row_bytes;
      std::memcpy(buf.field(k) + rb * static_cast<size_t>(r.first),
                  st.bytes.data() + st.offset[k] + rb * static_cast<size_t>(from), rb * count);
    }
    from += r.second - r.first;
  }
  st.ranges.clear();
}

void Pool::run_chunks(Job& job, int64_t home, Staging& staging, bool caller) {
  auto next_check = Clock::now() + std::chrono::milliseconds(kPollMs);
  // A sync job shared by several threads: stage the small rows (Staging) and
  // report the chunks finished once, after the copy, so that this thread
  // writes the job's shared cache lines (batch rows, done count, cost
  // estimates) once per call instead of once per env or per chunk.
  const bool sync = !job.async;
  const bool stage = sync && job.claims.homes() > 1;
  if (sync) prepare_staging(staging, static_cast<int64_t>(job.ids.size()));
  if (!sync) staging.rows.resize(fields_.size());
  int64_t ran_chunks = 0;
  int64_t ran_envs = 0;  // also the next staged row
  double ran_ns = 0.0;
  double peak_ns = 0.0;
  for (;;) {
    if (caller && sync && interrupt_check_ && Clock::now() >= next_check) {
      if (interrupted()) {
        // Nobody claims the remaining chunks; chunks on workers finish.
        job.claims.cancel();
        request_stop(std::string("the pool was closed because a ") +
                     (job.reset ? "reset" : "step") +
                     "() was interrupted while stepping envs; make a new one");
        throw Interrupted("interrupted");
      }
      next_check = Clock::now() + std::chrono::milliseconds(kPollMs);
    }
    // Workers abandon async work on close; a sync caller always finishes its
    // own job, so it never waits for chunks nobody will run.
    if (job.async && stopping_.load(std::memory_order_relaxed)) return;
    int64_t begin = 0;
    int64_t end = 0;
    if (!job.claims.claim(&begin, &end, home)) break;
    const auto t0 = Clock::now();
    for (int64_t j = begin; j < end; ++j) {
      if (job.async) {
        run_env(job, job.ids[j], staging);
      } else {
        point_rows(staging, *job.sync_buf, j, stage ? ran_envs + (j - begin) : -1);
        std::string err = process(job.ids[j], staging.rows.data(), job.reset);
        if (!err.empty()) {
          std::lock_guard<std::mutex> lock(job.mu);
          job.errors.emplace_back(job.ids[j], std::move(err));
        }
      }
    }
    if (stage && end > begin) staging.ranges.emplace_back(begin, end);
    if (end > begin) {
      const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      const double per_env = ns / static_cast<double>(end - begin);
      if (job.async) {
        record_cost(job.reset, per_env, per_env);
      } else {
        ran_ns += ns;
        ran_envs += end - begin;
        peak_ns = std::max(peak_ns, per_env);
      }
    }
    if (job.async) {
      job.claims.finish();
    } else {
      ++ran_chunks;
    }
  }
  if (!sync || ran_chunks == 0) return;
  if (ran_envs > 0) record_cost(job.reset, ran_ns / static_cast<double>(ran_envs), peak_ns);
  if (stage) flush_staged(staging, *job.sync_buf);
  if (job.claims.finish(ran_chunks)) {
    {
      std::lock_guard<std::mutex> lock(job.mu);
      job.finished = true;
    }
    job.cv.notify_all();
  }
}

void Pool::run_env(Job& job, int64_t env, Staging& staging) {
  point_rows(staging, *scratch_, env, -1);
  std::string err = process(env, staging.rows.data(), job.reset);
  // Claim the next batch row only now that the env has finished.
  const AsyncRing::Slot slot = ring_->claim();
  AsyncSet& set = *async_sets_[slot.set];
  for (size_t k = 0; k < fields_.size(); ++k) {
    std::memcpy(set.buf->at<uint8_t>(k, slot.row), scratch_->at<uint8_t>(k, env),
                fields_[k].row_bytes);
  }
  if (!err.empty()) {
    std::lock_guard<std::mutex> lock(ready_mu_);
    set.errors.emplace_back(env, std::move(err));
  }
  if (ring_->row_written(slot)) {
    {
      std::lock_guard<std::mutex> lock(ready_mu_);
      ring_->publish(slot.batch);
    }
    ready_cv_.notify_all();
  }
}

void Pool::snapshot_final(uint8_t* const* rows) const {
  std::memcpy(rows[BatchBuffers::kFinalObs], rows[BatchBuffers::kObs],
              fields_[BatchBuffers::kObs].row_bytes);
  for (size_t k = first_info_; k < first_final_info_; ++k) {
    const size_t f = first_final_info_ + (k - first_info_);
    std::memcpy(rows[f], rows[k], fields_[k].row_bytes);
  }
}

std::string Pool::process(int64_t env, uint8_t* const* rows, bool reset) {
  EnvSlot& s = slots_[env];
  // Strides of 0: rows[] already points at this env's row of every field.
  Row out(rows[BatchBuffers::kObs], rows + first_info_, zero_row_bytes_.data(), 0);
  double reward = 0.0;
  bool terminated = false;
  bool truncated = false;
  int64_t elapsed = 0;
  std::string error;
  const bool same_step = config_.autoreset == AutoReset::kSameStep;
  try {
    if (reset || s.needs_reset) {
      if (reset) {
        s.env->explicit_reset(s.rng, out);
      } else {
        s.env->reset(s.rng, out);
      }
      s.elapsed = 0;
      // Written only when they change: the calling thread reads this line
      // every call (see EnvSlot).
      if (!s.started) s.started = true;
      s.needs_reset = false;
      if (s.broken) s.broken = false;
      if (same_step) snapshot_final(rows);
    } else {
      Action action;
      action.discrete = act_discrete_[env];
      action.values = act_values_.data() + env * action_numel_;
      const StepResult r = s.env->step(action, s.rng, out);
      elapsed = ++s.elapsed;
      reward = r.reward;
      terminated = r.terminated;
      truncated = r.truncated || (max_episode_steps_ > 0 && elapsed >= max_episode_steps_);
      if (same_step) {
        snapshot_final(rows);
        if (terminated || truncated) {
          // The terminal state is gone after the reset: keep its render data
          // where asked for (one bool test per finished episode otherwise).
          if (s.keep_final_render) s.has_final_render = s.env->render(&s.final_render);
          s.env->reset(s.rng, out);
          s.elapsed = 0;
        }
      } else if (terminated || truncated) {
        // Still the terminal state until the next step resets it; kept all
        // the same, so that render(final) means one thing in both modes.
        if (s.keep_final_render) s.has_final_render = s.env->render(&s.final_render);
        s.needs_reset = true;
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown C++ exception";
  }
  if (!error.empty()) {
    s.broken = true;
    reward = 0.0;
    terminated = false;
    truncated = false;
  }
  // memcpy: a staged row has no alignment beyond its field's row size.
  std::memcpy(rows[BatchBuffers::kReward], &reward, sizeof(reward));
  *reinterpret_cast<bool*>(rows[BatchBuffers::kTerminated]) = terminated;
  *reinterpret_cast<bool*>(rows[BatchBuffers::kTruncated]) = truncated;
  const int32_t env32 = static_cast<int32_t>(env);
  const int32_t elapsed32 = static_cast<int32_t>(elapsed);
  std::memcpy(rows[BatchBuffers::kEnvId], &env32, sizeof(env32));
  std::memcpy(rows[BatchBuffers::kElapsed], &elapsed32, sizeof(elapsed32));
  return error;
}

}  // namespace torchfrag
