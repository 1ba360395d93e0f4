// Runs N ranks as threads of the test process: the one loop under every in-process harness (a
// transport, a communicator or a Runtime per rank is a thin layer that builds it inside fn).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

namespace hvd::test {

// Runs fn(rank) for rank 0..n-1, each on its own thread, waits for all, then rethrows the first
// failure by rank. Aborts the process if the ranks are not done after `limit`: a deadlock fails
// the suite fast instead of blocking it (every blocking call under test has its own, shorter,
// deadline, so only a bug hangs this long).
inline void runRankThreads(int n, const std::function<void(int)>& fn,
                           std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, limit, [&] { return finished == n; })) {
      std::cerr << "test hang: " << (n - finished) << " of " << n << " rank threads still running after "
                << limit.count() << " s; aborting" << std::endl;
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace hvd::test
