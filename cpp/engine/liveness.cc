#include "engine/liveness.h"

#include <algorithm>

#include "common/logging.h"
#include "common/params.h"

namespace hvd::engine {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds ms) {
  std::string text = std::to_string(static_cast<double>(ms.count()) / 1000.0);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text += '0';
  return text;
}

}  // namespace

LivenessWatch::LivenessWatch(std::shared_ptr<Store> store, Options options, SilentFn onSilent)
    : store_(std::move(store)), options_(std::move(options)), onSilent_(std::move(onSilent)) {
  thread_ = std::thread([this] { run(); });
}

LivenessWatch::~LivenessWatch() { stop(); }

void LivenessWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LivenessWatch::run() {
  std::vector<int> watched;
  if (options_.rank == 0) {
    for (int r = 1; r < options_.size; ++r) watched.push_back(r);
  } else {
    watched.push_back(0);
  }
  std::vector<int64_t> last(options_.size, -1);
  // When this watch first saw each counter's current value: the rank's last sign of life was at
  // or before it, so `now - changed` is a silence the rank certainly had.
  std::vector<Clock::time_point> changed(options_.size, Clock::now());
  Clock::time_point storeOk = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const Clock::time_point now = Clock::now();
    std::string silence;
    int silent = -1;
    // A round trip that succeeded, however late, shows the store and this process were running
    // again; the time it took beyond the usual is discounted below. A failed one is not: a store
    // that does not answer at all is what names rank 0.
    Clock::duration lateAnswer{};
    try {
      Deadline deadline = Deadline::after(options_.interval * 2);
      store_->add(key(options_.rank), 1, deadline);
      for (int r : watched) {
        int64_t value = store_->add(key(r), 0, deadline);
        if (value >= kDeparted) {
          changed[r] = Clock::time_point::max();  // never silent any more
          continue;
        }
        if (value != last[r]) {
          last[r] = value;
          changed[r] = now;
        } else if (now - changed[r] >= options_.timeout && silent < 0) {
          silent = r;
          silence = "Horovod lost rank " + std::to_string(r) +
                    (r < static_cast<int>(options_.hostOf.size()) ? " (host " + options_.hostOf[r] + ")" : "") +
                    ": it stopped responding (no sign of life for " + seconds(options_.timeout) +
                    " s: the process is paused or hung, or its host is unreachable)";
        }
      }
      storeOk = now;
      lateAnswer = Clock::now() - now;
    } catch (const std::exception& e) {
      if (now - storeOk >= options_.timeout) {
        silent = 0;
        silence =
            "Horovod lost the rendezvous store (no answer for " + seconds(options_.timeout) + " s: " + e.what() + ")";
      }
    }
    if (silent >= 0) {
      HVD_LOG(Debug) << "liveness watch on rank " << options_.rank << ": " << silence;
      onSilent_(silent, silence);
      lock.lock();
      break;
    }
    // Look again after `interval`, or right when a quiet rank's timeout ends if that is sooner:
    // a rank is named at its timeout, not up to an interval later.
    auto sleep = std::chrono::duration_cast<std::chrono::milliseconds>(options_.interval);
    for (int r : watched) {
      if (changed[r] == Clock::time_point::max()) continue;
      const auto due = std::chrono::ceil<std::chrono::milliseconds>(changed[r] + options_.timeout - Clock::now());
      sleep = std::clamp(due, std::chrono::milliseconds(1), sleep);
    }
    lock.lock();
    const Clock::time_point sleepStart = Clock::now();
    cv_.wait_for(lock, sleep, [&] { return stopping_; });
    // Time the watch could not observe is nobody's silence: it overslept (the machine or this
    // process was stalled or overloaded, so its peers may not have run either), or its store
    // answered late (the store's host or this process stalled: signs of life could not arrive).
    // Small delays count, so that steady load cannot postpone a verdict indefinitely.
    const auto unobserved = lateAnswer + (Clock::now() - sleepStart - sleep);
    if (unobserved > options_.interval / 4) {
      for (Clock::time_point& t : changed) {
        if (t != Clock::time_point::max()) t += unobserved;
      }
      storeOk += unobserved;
    }
  }
  const bool departing = stopping_;
  lock.unlock();
  if (departing) {
    try {
      store_->add(key(options_.rank), kDeparted, Deadline::after(options_.interval));
    } catch (const std::exception&) {
      // Peers that still watch will name us after their timeout; nothing better to do.
    }
  }
}

}  // namespace hvd::engine
