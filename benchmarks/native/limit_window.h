// The timed window shared by the physics-limit loops (box2d_limit.cpp,
// dmc_limit.cpp): every thread builds and warms its envs first, the clock
// starts once all are ready, and they all stop together when it ends.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace limit {

class Window {
 public:
  // Thread side: says this thread is ready, and returns when the clock starts.
  void arrive_and_wait() {
    ++ready_;
    while (!go_.load()) std::this_thread::yield();
  }
  // Thread side: whether the window is still open.
  bool open() const { return !stop_.load(std::memory_order_relaxed); }

  // Main side: waits for the `threads` started threads, opens the window for
  // `seconds`, joins them; returns the measured length of the window.
  double run(std::vector<std::thread>& threads, double seconds) {
    while (ready_.load() < static_cast<int>(threads.size())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto t0 = std::chrono::steady_clock::now();
    go_ = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop_ = true;
    for (auto& th : threads) th.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  std::atomic<int> ready_{0};
  std::atomic<bool> go_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace limit
