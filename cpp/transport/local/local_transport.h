// LocalTransport: the ranks of a job are threads of one process. For tests of algorithms,
// negotiation and the engine without sockets or shared-memory segments.
//
// Every rank builds its own LocalTransport with the same jobId; they meet in a process-wide hub
// keyed by jobId, created by the first rank to arrive and released when the last rank's
// transport is destroyed. The hub holds one unbounded FIFO byte stream per ordered pair of ranks
// (so send() never blocks and sendRecv() cannot deadlock), one mailbox per rank, and the shared
// spaces (plain heap buffers + a barrier) requested through sharedSpace(). With shared memory on,
// peerMemory() maps peers' shared buffers (transport/peer_memory.h) trivially: every rank is in
// this process, so a buffer's address is the same for all.
//
// Failure model (mirrors real transports): abort() on a rank makes that rank's blocking calls
// throw Aborted and makes its peers' blocking calls throw PeerLost(rank). Destroying a transport
// makes later waits on data from it throw PeerLost once the data it had sent is consumed.
// Blocking calls throw Timeout at their deadline.
//
// Threading: data-plane calls from one thread per rank (the thread running the engine);
// post/poll/wake/abort from any thread.
#pragma once

#include <memory>
#include <string>

#include "horovod/errors.h"
#include "transport/transport.h"

namespace hvd {

struct LocalTransportOptions {
  bool sharedMemory = true;             // offer sharedSpace() (all ranks are "on one host")
  size_t sharedCapacity = size_t(8) << 20;  // bytes per member buffer of a SharedSpace
  std::chrono::milliseconds connectTimeout{30000};  // construction waits this long for all ranks
};

class LocalHub;
class LocalSharedSpace;

class LocalTransport : public Transport {
 public:
  // All ranks of a job must pass the same jobId, size and options. Like a real transport's
  // connection setup, construction returns once every rank of the job has attached (so the hub
  // cannot be released under a late rank); throws Timeout after options.connectTimeout.
  LocalTransport(const std::string& jobId, int rank, int size, LocalTransportOptions options = {});
  ~LocalTransport() override;
  LocalTransport(const LocalTransport&) = delete;
  LocalTransport& operator=(const LocalTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "local"; }

  void send(int peer, const void* data, size_t bytes, Deadline deadline) override;
  void recv(int peer, void* data, size_t bytes, Deadline deadline) override;
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline deadline) override;
  SharedSpace* sharedSpace(const std::vector<int>& ranks, Deadline deadline) override;
  PeerMemory* peerMemory() override;

  void post(int peer, const void* data, size_t bytes) override;
  std::optional<MailboxMessage> poll() override;
  bool waitForMessage(Deadline deadline) override;
  void wake() override;

  void abort(const std::string& reason) override;

 private:
  void checkPeer(int peer) const;

  int rank_;
  int size_;
  LocalTransportOptions options_;
  std::shared_ptr<LocalHub> hub_;
  std::vector<std::unique_ptr<LocalSharedSpace>> spaces_;
};

}  // namespace hvd
