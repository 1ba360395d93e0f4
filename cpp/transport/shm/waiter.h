// Waiter: how one rank of the shm transport waits, wakes its peers, and notices failures.
//
// Waiting = spin briefly on the condition (no system calls), then sleep on this rank's bell
// futex (see layout.h) with a timeout of at most kLivenessInterval, re-checking the condition,
// the failure latch, the peers' `closed` flags and (every kLivenessInterval) whether each peer
// process still exists. Peer processes are watched through pidfds, which also report a killed
// process that has not been reaped yet (kill(pid, 0) does not).
//
// Failure latch: the first failure (a lost peer, abort(), a data-plane timeout) is stored and
// rethrown by every later wait and by throwIfFailed(), so every pending and later operation of
// the rank fails with the same typed error.
//
// Thread-safety: wait(), notify(), ringOwn(), abort(), fail() and throwIfFailed() may be called
// from any thread of the owning rank. addPeer() only during setup.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/cpu_relax.h"
#include "common/deadline.h"
#include "transport/poll_patience.h"
#include "transport/shm/layout.h"

namespace hvd::shm {

void yieldCpu();  // sched_yield()

// Selects the peers (transport ranks) a wait depends on; empty = every peer.
using PeerFilter = std::function<bool(int rank)>;

class Waiter {
 public:
  static constexpr std::chrono::milliseconds kLivenessInterval{100};

  // Waits spin for up to `spin` (busy for at most `busySpin` of it, yielding the CPU between
  // polls after that) before they sleep.
  Waiter(int rank, SegmentHeader* own, std::chrono::microseconds spin, std::chrono::microseconds busySpin);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Watches `rank` (whose segment header is `header`, process `pid`) from now on.
  void addPeer(int rank, SegmentHeader* header, int pid);

  // Waits until ready() returns true (true) or the deadline passes (false). ready() is called
  // repeatedly from this thread and may make progress itself. Throws the latched failure
  // (PeerLost, Aborted, ...) when one exists or is detected while waiting. Polls for the spin,
  // or for this thread's PollPatience if longer, before it sleeps.
  template <typename Ready>
  bool wait(Ready&& ready, Deadline deadline, const PeerFilter& needs = {}) {
    if (ready()) return true;
    throwIfFailed();
    const std::chrono::microseconds spin = std::max(spin_, PollPatience::current());
    if (spin.count() > 0) {
      // Busy-wait first (a peer running on another CPU answers within ~1 us), then keep
      // polling but yield the CPU between polls, so that a peer or any other thread waiting
      // for this CPU runs (2 ranks on 2 vCPUs), while this thread stays runnable and skips the
      // costly sleep/wake-up cycle of an idle CPU.
      auto start = std::chrono::steady_clock::now();
      bool yielding = false;
      for (unsigned i = 1;; ++i) {
        if (yielding) {
          yieldCpu();
        } else {
          cpuRelax();
        }
        if (ready()) return true;
        if (yielding || (i & 15) == 0) {
          throwIfFailed();
          auto spun = std::chrono::steady_clock::now() - start;
          if (spun >= spin || std::chrono::steady_clock::now() >= deadline.at()) break;
          yielding = spun >= busySpin_;
        }
      }
    }
    return block(ready, deadline, needs);
  }
  // Like wait() without the spin phase (helper threads that must not take a CPU from the rank).
  template <typename Ready>
  bool waitWithoutSpin(Ready&& ready, Deadline deadline, const PeerFilter& needs = {}) {
    if (ready()) return true;
    throwIfFailed();
    return block(ready, deadline, needs);
  }

  // Wakes `header`'s owner if it is sleeping (a fence and a load when it is not).
  static void notify(SegmentHeader* header);
  // Wakes this rank's own sleepers (wake(), abort()).
  void ringOwn() { notify(own_); }

  // Latches Aborted(reason) (unless a failure is latched already) and wakes this rank.
  void abort(const std::string& reason);
  // Latches `error` (first failure wins), wakes this rank, and throws the latched failure.
  [[noreturn]] void fail(std::exception_ptr error);
  // A data-plane wait of this rank timed out waiting for `peer`: latches `error` (a Timeout),
  // records the peer in this rank's header (SegmentHeader::timedOutOn) and throws.
  [[noreturn]] void failWaitingFor(int peer, std::exception_ptr error);
  // A watched peer whose process is stopped (SIGSTOP, a debugger: state T or t in
  // /proc/<pid>/stat), or -1. Such a peer is alive but answers nothing; it is the one to blame
  // when a wait times out, whichever peer the wait was for.
  int stoppedPeer() const;
  // Waits fail with PeerLost once a watched peer has stayed stopped longer than `limit` (0: never),
  // even waits without a deadline of their own (a rank waiting for the coordinator's next list).
  void setStopLimit(std::chrono::milliseconds limit) { stopLimitMs_.store(limit.count()); }
  // Records in this rank's header whom its failure is blamed on (first one wins), so that peers
  // that see it close name that rank (SegmentHeader::timedOutOn).
  void recordBlame(int peer) {
    uint32_t none = 0;
    if (peer >= 0 && peer != rank_) own_->timedOutOn.compare_exchange_strong(none, static_cast<uint32_t>(peer) + 1);
  }
  void throwIfFailed() const {
    if (failed_.load(std::memory_order_acquire)) rethrow();
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }

 private:
  template <typename Ready>
  bool block(Ready& ready, Deadline deadline, const PeerFilter& needs) {
    SleepScope scope(own_);
    for (;;) {
      uint32_t seen = own_->bell.load(std::memory_order_acquire);
      if (ready()) return true;
      throwIfFailed();
      if (!peersAlive(needs)) {
        // A peer that finished its part and then exited may have left what we wait for.
        if (ready()) return true;
        rethrow();
      }
      if (deadline.expired()) return ready();
      sleep(seen, deadline);
    }
  }

  struct SleepScope {
    explicit SleepScope(SegmentHeader* h) : header(h) {
      header->sleepers.fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    ~SleepScope() { header->sleepers.fetch_sub(1, std::memory_order_seq_cst); }
    SegmentHeader* header;
  };

  struct WatchedPeer {
    int rank;
    SegmentHeader* header;
    int pid;
    int pidfd;  // -1 when pidfds are unavailable (kill(pid, 0) then)
  };

  // Checks closed flags always and processes at most every kLivenessInterval; latches PeerLost
  // and returns false on the first lost peer. A peer that died (no clean close) is always a
  // loss; a peer that closed its transport cleanly only when `needs` selects it (empty = all).
  bool peersAlive(const PeerFilter& needs);
  // peersAlive's parts. Whether a closed `peer` fails a wait selected by `needs`. The pidfd
  // poll: latches PeerLost and returns false for a peer that died without closing; sets
  // `exitedClosed` to the first exited peer that closed first and concerns the wait. The stop
  // check (at most every 250 ms): false, latched, for a peer stopped past the stop limit. The
  // PeerLost for a closed peer (`exited`: its process is gone too), naming the rank it blamed.
  static bool concerns(const WatchedPeer& peer, const PeerFilter& needs);
  bool noPeerDied(const PeerFilter& needs, const WatchedPeer*& exitedClosed);
  bool noPeerStoppedTooLong();
  void latchClosed(const WatchedPeer& closed, bool exited);
  void sleep(uint32_t seen, Deadline deadline);
  void latch(std::exception_ptr error);
  [[noreturn]] void rethrow() const;

  int rank_;
  SegmentHeader* own_;
  std::chrono::microseconds spin_;
  std::chrono::microseconds busySpin_;
  std::vector<WatchedPeer> peers_;
  std::mutex pollMutex_;  // guards lastPoll_ (waits from several threads)
  std::chrono::steady_clock::time_point lastPoll_{};
  std::atomic<int64_t> stopLimitMs_{0};  // set after the helper threads may have started
  std::chrono::steady_clock::time_point lastStopCheck_{};  // guarded by pollMutex_
  std::vector<std::chrono::steady_clock::time_point> stoppedSince_;  // per peer; {} = running

  std::atomic<bool> failed_{false};
  mutable std::mutex failureMutex_;
  std::exception_ptr failure_;
};

}  // namespace hvd::shm
