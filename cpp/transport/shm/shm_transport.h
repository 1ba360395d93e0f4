// ShmTransport: the Transport between ranks of one host, through shared memory.
//
// Setup (the constructor, collective over all `size` ranks of the context, bounded by
// context.timeout): each rank creates one segment (layout.h) holding its inbound data rings and
// mailbox rings (one of each per sender) and its wake-up word, publishes its descriptor in the
// store, maps every peer's segment, and confirms through the store; then nothing of it has a
// name any more (segment.h), so no file can outlive the job. If some rank cannot open a peer's
// anonymous segment through /proc, all ranks fall back to named segments, unlinked right after
// the confirmation.
//
// Ranks: the transport's ranks are 0..size-1 of the context it was built over, and PeerLost,
// error messages and MailboxMessage::from use those numbers. A composite transport that builds
// this one over the local ranks of a host (renumbered) maps them back to global ranks.
//
// Data plane: send() copies into the receiver's ring for this sender in chunks, recv() copies
// out; a message larger than the ring streams through it while both run. Control plane: post()
// never blocks: what does not fit into the receiver's mailbox ring waits in a per-peer outbox
// that every wait, post() and poll() of this rank drains, and so does a helper thread (started
// on the first overflow, asleep while the outboxes are empty), so a message is delivered even if
// the poster makes no further transport call. Any message size works. Messages still in an
// outbox when the transport is destroyed are dropped (closing is not a flush).
//
// Threads: the data plane is used by one thread at a time (the thread running the engine);
// post()/poll()/waitForMessage() by one controller thread (may be the same), post() and wake()
// and abort() from any thread. A self-send (peer == rank) goes through a local queue.
//
// Failure: every wait watches all peers; see waiter.h. The destructor marks this rank closed and
// wakes its peers, which then fail their waits with PeerLost (after consuming what it left).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/params.h"
#include "horovod/errors.h"
#include "transport/shm/mailbox_reader.h"
#include "transport/shm/peer_mappings.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "transport/shm/waiter.h"
#include "transport/transport.h"

namespace hvd::shm {

struct ShmOptions {
  size_t ringBytes = size_t{1} << 20;      // per sender, rounded up to a power of two (>= 4 KiB)
  size_t mailboxBytes = size_t{256} << 10;  // per sender, ditto
  size_t spaceBytes = size_t{4} << 20;      // SharedSpace capacity per member
  // Poll this long before sleeping in a wait, busy (no yield) for at most `busySpin` of it.
  // Negative: chosen at connect by defaultSpin() for the number of local ranks.
  std::chrono::microseconds spin{-1};
  std::chrono::microseconds busySpin{-1};
  bool named = false;                       // force named /dev/shm segments

  // From HOROVOD_SHM_RING_BYTES, HOROVOD_SHM_MAILBOX_BYTES, HOROVOD_SHM_SPACE_BYTES,
  // HOROVOD_SHM_SPIN_US, HOROVOD_SHM_BUSY_SPIN_US, HOROVOD_SHM_NAMED. Throws InvalidArgument on bad values.
  static ShmOptions fromEnvironment(const EnvLookup& env = processEnvironment());
};

// The polling defaults for `localRanks` ranks sharing `cpus` CPUs. Enough CPUs: busy-poll 5 us
// (a peer on another CPU answers within ~1 us), then yield between polls up to 100 us, then
// sleep. More ranks than CPUs: yield from the first poll and keep polling for 10 ms (a sleeping
// rank must be woken and scheduled for every message, which costs tens of microseconds on a
// busy CPU; a yielding one hands the CPU to the peer it waits for).
struct SpinDefaults {
  std::chrono::microseconds spin;
  std::chrono::microseconds busySpin;
};
SpinDefaults defaultSpin(int localRanks, int cpus);
// CPUs this process may run on (sched_getaffinity), at least 1.
int usableCpus();

class ShmSpace;

class ShmTransport final : public Transport {
 public:
  // Collective; throws InvalidArgument on a bad context, Timeout when a peer does not show up.
  ShmTransport(const TransportContext& context, ShmOptions options);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shm"; }

  void send(int peer, const void* data, size_t bytes, Deadline deadline) override;
  void recv(int peer, void* data, size_t bytes, Deadline deadline) override;
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline deadline) override;
  SharedSpace* sharedSpace(const std::vector<int>& ranks, Deadline deadline) override;
  PeerMemory* peerMemory() override { return &peerMappings_; }

  void post(int peer, const void* data, size_t bytes) override;
  std::optional<MailboxMessage> poll() override;
  bool waitForMessage(Deadline deadline) override;
  void wake() override;
  void abort(const std::string& reason) override;
  void noteCulprit(int rank) override {
    if (waiter_) waiter_->recordBlame(rank);
  }

  // True when segments are named (/dev/shm) rather than anonymous; for tests.
  bool usesNamedSegments() const { return named_; }

 private:
  friend class ShmSpace;

  struct Peer {
    Segment segment;                  // the peer's segment
    SegmentHeader* header = nullptr;  // in it
    Ring dataOut, mailOut;            // we write into the peer's segment
    Ring dataIn, mailIn;              // the peer writes into ours
    // Inbound messages being assembled (controller thread).
    MailboxReader mailReader;
    // Outbound bytes that did not fit into the peer's mailbox yet (guarded by outboxMutex_).
    std::vector<uint8_t> outbox;
    size_t outboxSent = 0;
  };

  void connect(Deadline deadline);
  // connect()'s parts: the name of `rank`'s segment in attempt `round` (0: first, 1: the named
  // fallback); this rank's segment with its header filled in (own_, header_); a peer's mapped
  // segment checked against our layout and its rings set up (peers_[p], the waiter).
  std::string roundSegmentName(int rank, int round) const;
  void createOwnSegment(bool named, int round);
  void attachPeer(int p, Segment segment);
  // Collective among `members`: publishes `own` under `prefix`, maps every other member's
  // segment of `bytes`, confirms. On success fills `out` (indexed like members, own slot empty);
  // returns "" on success, else the combined reasons of every member that failed.
  std::string exchange(const std::string& prefix, const std::vector<int>& members, Segment& own, size_t bytes,
                       std::vector<Segment>& out, Deadline deadline);
  void checkPeer(int peer, const char* op) const;
  void notifyPeers();
  // Waits for ready(); at the deadline latches and throws Timeout(describe()). Keeps draining
  // outboxes meanwhile, so a peer waiting for our messages is never starved by our waits.
  // Only a peer selected by `needs` (empty = all) fails the wait by closing cleanly; a peer
  // that dies fails every wait.
  // `silent`: the peer the wait depends on (blamed when it times out: peers that see this rank
  // fail name it, see SegmentHeader::timedOutOn), -1 = several or none.
  template <typename Ready, typename Describe>
  void waitOrTimeout(Ready&& ready, Deadline deadline, Describe&& describe, const shm::PeerFilter& needs = {},
                     int silent = -1) {
    waitOrBlame(std::forward<Ready>(ready), deadline, std::forward<Describe>(describe), needs,
                [silent] { return silent; });
  }
  // The same, with the peer to blame found once the wait timed out (silent() -> rank or -1).
  template <typename Ready, typename Describe, typename Silent>
  void waitOrBlame(Ready&& ready, Deadline deadline, Describe&& describe, const shm::PeerFilter& needs,
                   Silent&& silent) {
    bool ok = waiter_->wait(
        [&] {
          flushOutboxes();
          return ready();
        },
        deadline, needs);
    if (ok) return;
    // A stopped peer answers nothing: it is to blame, whichever peer this wait was for.
    const int stopped = waiter_->stoppedPeer();
    if (stopped >= 0) {
      waiter_->failWaitingFor(stopped, std::make_exception_ptr(PeerLost(
                                           stopped, "Horovod rank " + std::to_string(stopped) +
                                                        " is stopped (SIGSTOP or a debugger) and did not answer in "
                                                        "time: " +
                                                        describe())));
    }
    waiter_->failWaitingFor(silent(), std::make_exception_ptr(Timeout(describe())));
  }
  // Moves data through the rings: to `to` and from `from` at once (send/recv/sendRecv).
  void transfer(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline deadline, const char* op);
  // Writes what it can of the peer's outbox; caller holds outboxMutex_. Returns true on progress.
  bool flushOutbox(Peer& peer);
  void flushOutboxes() {
    if (outboxesPending_.load(std::memory_order_relaxed) != 0) flushOutboxesSlow();
  }
  void flushOutboxesSlow();  // skips when another thread holds the outbox mutex
  bool messageMaybeReady();
  std::optional<MailboxMessage> pollPeer(int from);

  int rank_;
  int size_;
  std::string jobId_;
  std::shared_ptr<Store> store_;
  ShmOptions options_;
  size_t dataChunk_;
  bool named_ = false;
  SegmentLayout layout_;
  Segment own_;
  SegmentHeader* header_ = nullptr;
  std::vector<Peer> peers_;  // indexed by rank; own entry unused
  std::unique_ptr<Waiter> waiter_;

  std::mutex outboxMutex_;
  std::atomic<int> outboxesPending_{0};
  // Outbox helper thread (see the header comment).
  void flusherLoop();
  std::thread flusher_;
  std::mutex flusherMutex_;
  std::condition_variable flusherWork_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> wakePending_{false};
  int pollNext_ = 0;

  // Self traffic.
  std::vector<uint8_t> selfData_;  // data plane (one thread); bytes before selfDataRead_ consumed
  size_t selfDataRead_ = 0;
  std::mutex selfMutex_;
  std::deque<std::vector<uint8_t>> selfMessages_;
  std::atomic<int> selfMessageCount_{0};

  std::mutex spaceMutex_;
  std::map<std::vector<int>, std::unique_ptr<ShmSpace>> spaces_;
  // Peers' shared buffers mapped so far (data-plane thread only).
  PeerMappings peerMappings_;
};

}  // namespace hvd::shm
