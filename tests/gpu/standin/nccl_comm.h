// One rank's view of a stand-in NCCL communicator: a POSIX shared-memory segment named by the
// ncclUniqueId, joined by every rank of the communicator (so all ranks must run on one host),
// holding a process-shared robust mutex and condition variable, one staging slot per rank for
// the collectives and one mailbox per ordered pair of ranks for send/recv.
//
// Waiting for peers never relies on a timer alone: a waiter wakes on every change of the segment
// and, every few milliseconds, checks that the peers it waits for are alive (pid + start time in
// /proc). A dead peer, or a peer that aborted or destroyed its communicator, sets the async error
// ncclRemoteError and the op keeps waiting, as NCCL's kernels do, until ncclCommAbort ends it.
#pragma once

#include <nccl.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace standin {

constexpr int kMaxRanks = 64;

// Remembers `message` as what ncclGetLastError returns (nccl_api.cc).
void ncclRecordError(const std::string& message);

// What a rank is doing in its current collective, compared across ranks to catch mismatches.
struct CollectiveDesc {
  uint64_t index = 0;  // collectives issued on the communicator before this one, plus one
  int kind = 0;        // CollectiveKind
  uint64_t count = 0;
  int dtype = 0;
  int op = 0;
  int root = 0;
};
enum CollectiveKind : int { kAllReduce = 1, kAllGather, kBroadcast, kReduceScatter };

struct RankSlot {
  int pid;
  uint64_t startTime;
  int joined;
  int left;  // destroyed or aborted its communicator
  CollectiveDesc posted;
};

struct Mailbox {
  int full;
  uint64_t messageBytes;  // the whole message's size, checked against the receive
  uint64_t chunkBytes;
};

struct SegmentHeader {
  std::atomic<uint32_t> ready;
  int nranks;
  uint64_t slotBytes;
  uint64_t boxBytes;
  uint64_t totalBytes;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int joined;
  int unlinked;
  uint64_t barrierGeneration;
  int arrived;
  int failure;  // an ncclResult_t every rank's op ends with (send/recv size mismatch)
  RankSlot ranks[kMaxRanks];
  Mailbox boxes[kMaxRanks * kMaxRanks];
};

// One queued NCCL call, as the stream thread executes it.
struct NcclCall {
  enum Kind { kAllReduce, kAllGather, kBroadcast, kReduceScatter, kSend, kRecv } kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int peer = 0;  // root (broadcast) or peer (send/recv)
  std::string describe() const;
};

class Comm {
 public:
  // Creates or joins the segment `name` and waits until all `nranks` ranks joined.
  static ncclResult_t join(const std::string& name, int nranks, int rank, int device, std::shared_ptr<Comm>* out,
                           std::string* error);
  ~Comm();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }

  // Host side.
  ncclResult_t asyncError() const { return static_cast<ncclResult_t>(asyncError_.load()); }
  // Issues the next ticket (calls run in ticket order) to `enqueue`, which queues the call on its
  // stream and says whether it did; a ticket that was not queued is not issued.
  bool issue(const std::function<bool(uint64_t ticket)>& enqueue);
  void abort();      // ends the running call, skips queued ones; returns once none runs
  // Waits until every issued call finished; fails (instead of hanging) once an async error is set.
  ncclResult_t drain(std::string* error);
  void leave();  // marks this rank gone in the segment

  // Stream thread: runs the calls of one group (or one lone call) with ticket `ticket`.
  void execute(uint64_t ticket, const std::vector<NcclCall>& calls);

 private:
  Comm() = default;
  ncclResult_t run(const std::vector<NcclCall>& calls);
  ncclResult_t collective(const NcclCall& call);
  ncclResult_t pointToPoint(const std::vector<NcclCall>& calls);
  ncclResult_t barrier();
  // With the segment locked: waits until `done()`; ncclInternalError-free outcomes only:
  // ncclSuccess, or the error the op ends with (local abort, a segment-wide failure).
  template <typename Pred>
  ncclResult_t waitLocked(Pred done);
  void lock();
  void unlock();
  void checkPeers();
  void setAsyncError(ncclResult_t error, const std::string& message);
  char* slot(int rank) const;
  char* box(int from, int to) const;

  int rank_ = 0;
  int nranks_ = 0;
  int device_ = 0;
  std::string name_;
  void* map_ = nullptr;
  size_t mapBytes_ = 0;
  SegmentHeader* hdr_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::atomic<int> asyncError_{ncclSuccess};
  uint64_t collectives_ = 0;
  std::vector<bool> waitPeers_;  // the ranks the running op waits for (checkPeers looks at these)

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t issued_ = 0;
  uint64_t finished_ = 0;
  bool running_ = false;
};

}  // namespace standin
