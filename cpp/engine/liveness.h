// LivenessWatch: notices a rank that stopped running while its connections stay open: paused
// (SIGSTOP, a debugger), hung in the kernel, or on a host cut off from the others. Transports see
// a dead process at once (its sockets close, its pid vanishes); a silent one shows only as peers
// waiting, in negotiation for as long as the stall inspector allows and in transfers until their
// deadline. The watch makes that a PeerLost within `timeout`.
//
// How: every rank's watch thread bumps its own counter "alive/<rank>" in the round's store every
// `interval`; rank 0 reads every other rank's counter, the others read rank 0's. A counter that
// has not moved for `timeout` names its rank: onSilent(rank, message) is called once, from the
// watch thread, at most `timeout` + `interval` after the rank's last bump (the watch reads at
// least every `interval`, and wakes at the moment a quiet counter's timeout ends). A rank that leaves (stop()) marks its counter as departed first, so peers that
// are still finishing do not mistake its shutdown for silence. When the store itself stops
// answering for `timeout` (e.g. it lives in a paused rank 0), rank 0 is named. Time the watch
// could not observe does not count as anyone's silence: when it overslept its interval (the machine
// stalled or was overloaded, so its peers may not have run either) or its store answered late (the
// store's host or this process stalled, so no sign of life could arrive). A virtual machine whose
// vCPUs are descheduled for seconds stalls every process at once; that is not a lost rank.
//
// The thread is cheap (one store round trip per interval, plus size - 1 on rank 0) and holds no
// engine lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"

namespace hvd::engine {

class LivenessWatch {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::vector<std::string> hostOf;  // for messages
    std::chrono::milliseconds interval{500};
    std::chrono::milliseconds timeout{1500};
  };
  using SilentFn = std::function<void(int rank, const std::string& message)>;

  LivenessWatch(std::shared_ptr<Store> store, Options options, SilentFn onSilent);
  ~LivenessWatch();  // stop()
  LivenessWatch(const LivenessWatch&) = delete;
  LivenessWatch& operator=(const LivenessWatch&) = delete;

  // Marks this rank as departed (best effort) and joins the thread. Idempotent.
  void stop();

  // Counter values at or above this mean "departed".
  static constexpr int64_t kDeparted = int64_t{1} << 40;

 private:
  void run();
  std::string key(int rank) const { return "alive/" + std::to_string(rank); }

  std::shared_ptr<Store> store_;
  Options options_;
  SilentFn onSilent_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hvd::engine
