// LocalHub: the state the LocalTransports of one job share (internal to transport/local).
// One mutex guards streams, mailboxes and membership; each rank has a condition variable that
// senders, posters, wake() and failures notify. Shared groups have their own mutex for barriers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace hvd {

// A heap block with a separate size, so chunks can be recycled without zero-filling.
struct LocalChunk {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0;
  size_t capacity = 0;
};

// Bytes in flight from one rank to another, in order.
struct LocalStream {
  std::deque<LocalChunk> chunks;
  size_t offset = 0;              // bytes of chunks.front() already consumed
  std::vector<LocalChunk> spare;  // consumed chunks kept for reuse by the sender
};

struct LocalRankState {
  std::condition_variable cv;  // waits of this rank (recv, mailbox), under LocalHub::mutex
  std::deque<MailboxMessage> mailbox;
  bool woken = false;
  bool present = false;              // a transport for this rank exists now
  std::atomic<bool> departed{false};  // its transport was destroyed
  std::atomic<bool> aborted{false};   // abort() was called on it
  std::string abortReason;
};

// Buffers and barrier of one SharedSpace (one member list).
struct LocalSharedGroup {
  std::vector<int> members;
  size_t capacity = 0;
  std::vector<std::unique_ptr<uint8_t[], void (*)(void*)>> buffers;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<uint64_t> generation{0};
  // SharedSpace::publish() values, one per member; waiters sleep on `cv` (under `mutex`).
  std::unique_ptr<std::atomic<uint64_t>[]> published;
};

class LocalHub {
 public:
  // Returns the hub for jobId, creating it for `size` ranks if absent. Throws InvalidArgument on
  // a size mismatch or when `rank` already has a live transport.
  static std::shared_ptr<LocalHub> attach(const std::string& jobId, int rank, int size);
  explicit LocalHub(int size);

  int size() const { return size_; }
  LocalStream& stream(int from, int to) { return streams_[static_cast<size_t>(from) * size_ + to]; }
  LocalRankState& rank(int r) { return *ranks_[r]; }
  // First failed rank (aborted) other than `self`, or -1. Lock-free.
  int failedRank(int self) const;
  // Notifies every waiter of every rank and every shared group (after a failure).
  void notifyAll();
  std::shared_ptr<LocalSharedGroup> sharedGroup(const std::vector<int>& members, size_t capacity);

  std::mutex mutex;
  int attached = 0;  // transports ever attached (under mutex); construction waits for all

 private:
  int size_;
  std::vector<LocalStream> streams_;
  std::vector<std::unique_ptr<LocalRankState>> ranks_;
  std::map<std::vector<int>, std::shared_ptr<LocalSharedGroup>> groups_;  // under mutex
};

}  // namespace hvd
