#include "transport/shm/waiter.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/messages.h"
#include "horovod/errors.h"

namespace hvd::shm {
namespace {

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// True when the process is stopped (SIGSTOP, a debugger): state T or t in /proc/<pid>/stat.
bool processStopped(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  return close != nullptr && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
}

}  // namespace

void yieldCpu() { ::sched_yield(); }

Waiter::Waiter(int rank, SegmentHeader* own, std::chrono::microseconds spin, std::chrono::microseconds busySpin)
    : rank_(rank), own_(own), spin_(spin), busySpin_(busySpin) {}

Waiter::~Waiter() {
  for (auto& peer : peers_) {
    if (peer.pidfd >= 0) ::close(peer.pidfd);
  }
}

void Waiter::addPeer(int rank, SegmentHeader* header, int pid) {
  int fd = openPidfd(pid);  // pidfds are always close-on-exec
  if (fd < 0 && errno == ESRCH) {
    // Already gone: latch it now so the first wait reports it.
    latch(std::make_exception_ptr(PeerLost(rank, "Horovod lost rank " + std::to_string(rank) + " (pid " +
                                                     std::to_string(pid) + ") on this host: the process exited")));
  }
  peers_.push_back({rank, header, pid, fd});
}

void Waiter::notify(SegmentHeader* header) {
  // Pairs with SleepScope: either the sleeper's re-check sees our update, or we see it sleeping.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header->sleepers.load(std::memory_order_relaxed) != 0) {
    header->bell.fetch_add(1, std::memory_order_release);
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header->bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

void Waiter::sleep(uint32_t seen, Deadline deadline) {
  auto wait = std::min<std::chrono::milliseconds>(deadline.remaining(), kLivenessInterval);
  if (wait.count() <= 0) wait = std::chrono::milliseconds(1);
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(wait.count() / 1000);
  ts.tv_nsec = static_cast<long>((wait.count() % 1000) * 1000000L);
  // Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&own_->bell), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

bool Waiter::concerns(const WatchedPeer& peer, const PeerFilter& needs) {
  // A peer that failed (aborted) concerns every wait; one that closed cleanly only those
  // selected by `needs`.
  return !needs || needs(peer.rank) || peer.header->closed.load(std::memory_order_acquire) == kClosedFailed;
}

bool Waiter::peersAlive(const PeerFilter& needs) {
  const WatchedPeer* closed = nullptr;
  for (const auto& peer : peers_) {
    if (peer.header->closed.load(std::memory_order_acquire) != 0 && concerns(peer, needs)) {
      closed = &peer;
      break;
    }
  }
  {
    // A closed peer often closed because another one died: look for the dead one first, so
    // that every survivor names the root cause.
    std::lock_guard<std::mutex> lock(pollMutex_);
    auto now = std::chrono::steady_clock::now();
    if (closed == nullptr && now - lastPoll_ < kLivenessInterval) return true;
    lastPoll_ = now;
  }
  const WatchedPeer* exitedClosed = nullptr;
  if (!noPeerDied(needs, exitedClosed)) return false;
  if (exitedClosed != nullptr) closed = exitedClosed;
  if (closed == nullptr) return noPeerStoppedTooLong();
  latchClosed(*closed, closed == exitedClosed);
  return false;
}

bool Waiter::noPeerDied(const PeerFilter& needs, const WatchedPeer*& exitedClosed) {
  std::vector<struct pollfd> fds;
  fds.reserve(peers_.size());
  for (const auto& peer : peers_) {
    if (peer.pidfd >= 0) {
      fds.push_back({peer.pidfd, POLLIN, 0});
    } else if (::kill(peer.pid, 0) != 0 && errno == ESRCH) {
      fds.push_back({-1, POLLIN, POLLIN});  // marks it dead below
    } else {
      fds.push_back({-1, 0, 0});
    }
  }
  ::poll(fds.data(), fds.size(), 0);
  // Several peers may be gone: name one that died without closing its transport (killed,
  // crashed) before one that closed first (it most likely exited because of the former).
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const auto& peer = peers_[i];
    if (peer.header->closed.load(std::memory_order_acquire) != 0) {
      if (exitedClosed == nullptr && concerns(peer, needs)) exitedClosed = &peer;
      continue;
    }
    latch(std::make_exception_ptr(PeerLost(peer.rank, "Horovod lost rank " + std::to_string(peer.rank) + " (pid " +
                                                          std::to_string(peer.pid) +
                                                          ") on this host: the process exited")));
    return false;
  }
  return true;
}

bool Waiter::noPeerStoppedTooLong() {
  const auto stopLimit = std::chrono::milliseconds(stopLimitMs_.load());
  if (stopLimit.count() <= 0) return true;
  // A peer stopped for longer than the operation timeout is lost, even when no wait of this
  // rank has a deadline (waiting for a coordinator that is stopped would otherwise hang).
  std::lock_guard<std::mutex> lock(pollMutex_);
  auto now = std::chrono::steady_clock::now();
  if (now - lastStopCheck_ < std::chrono::milliseconds(250)) return true;
  lastStopCheck_ = now;
  stoppedSince_.resize(peers_.size());
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (!processStopped(peers_[i].pid)) {
      stoppedSince_[i] = {};
      continue;
    }
    if (stoppedSince_[i] == std::chrono::steady_clock::time_point{}) stoppedSince_[i] = now;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - stoppedSince_[i]);
    if (ms > stopLimit) {
      recordBlame(peers_[i].rank);
      latch(std::make_exception_ptr(PeerLost(
          peers_[i].rank, "Horovod rank " + std::to_string(peers_[i].rank) + " (pid " + std::to_string(peers_[i].pid) +
                              ") on this host has been stopped (SIGSTOP or a "
                              "debugger) for " +
                              std::to_string(ms.count()) +
                              " ms, longer than HOROVOD_GLOO_TIMEOUT_SECONDS; it did not answer in time")));
      return false;
    }
  }
  return true;
}

void Waiter::latchClosed(const WatchedPeer& closed, bool exited) {
  // A peer that gave up because a third rank did not answer it: blame that rank (a stopped or
  // hung process is alive but silent), not the messenger.
  const uint32_t blamed = closed.header->timedOutOn.load(std::memory_order_acquire);
  if (blamed != 0 && static_cast<int>(blamed - 1) != closed.rank) {
    const int silent = static_cast<int>(blamed - 1);
    latch(std::make_exception_ptr(PeerLost(
        silent, "Horovod rank " + std::to_string(silent) + (silent == rank_ ? " (this rank)" : "") +
                    " did not answer in time: rank " + std::to_string(closed.rank) +
                    " gave up waiting for it (a timeout, or it found it silent) and "
                    "aborted while rank " +
                    std::to_string(rank_) + " was waiting for rank " + std::to_string(closed.rank) + " (is rank " +
                    std::to_string(silent) + " stopped, hung or starved of CPU? see HOROVOD_GLOO_TIMEOUT_SECONDS)")));
    return;
  }
  const bool aborted = closed.header->closed.load() == kClosedFailed;
  latch(std::make_exception_ptr(PeerLost(
      closed.rank,
      "Horovod lost rank " + std::to_string(closed.rank) + " (pid " + std::to_string(closed.pid) +
          ") on this host: it " + (aborted ? "failed (aborted its transport" : "shut down (closed its transport") +
          (exited ? " and exited" : "") + ") while rank " + std::to_string(rank_) + " was still waiting for it",
      aborted)));
}

void Waiter::latch(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_) return;
    failure_ = std::move(error);
    failed_.store(true, std::memory_order_release);
  }
  ringOwn();  // other threads of this rank blocked in waits re-check the latch
}

void Waiter::abort(const std::string& reason) {
  latch(std::make_exception_ptr(Aborted(reason.empty() ? std::string(kShutdownMessage) : reason)));
}

void Waiter::fail(std::exception_ptr error) {
  latch(std::move(error));
  rethrow();
}

void Waiter::failWaitingFor(int peer, std::exception_ptr error) {
  uint32_t none = 0;
  if (peer >= 0 && !failed()) {
    own_->timedOutOn.compare_exchange_strong(none, static_cast<uint32_t>(peer) + 1, std::memory_order_seq_cst);
  }
  fail(std::move(error));
}

int Waiter::stoppedPeer() const {
  for (const auto& peer : peers_) {
    if (processStopped(peer.pid)) return peer.rank;
  }
  return -1;
}

void Waiter::rethrow() const {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    error = failure_;
  }
  std::rethrow_exception(error);
}

}  // namespace hvd::shm
