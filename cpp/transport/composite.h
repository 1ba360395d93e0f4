// CompositeTransport ("shm+tcp"): shared memory between ranks of one host, TCP across hosts.
//
// Built over all ranks of the job. Ranks with the same hostOf entry as this rank are "local":
// data to and from them goes through a local sub-transport (by default "shm") built over the
// local ranks only, renumbered 0..localSize-1 (its store is prefixed per host, its jobId
// suffixed per host, so two fake "hosts" on one machine do not collide). Everything else goes
// through a remote sub-transport (by default "tcp") built over all ranks. When the local
// backend is not registered, or this host has a single rank, everything goes through the
// remote one.
//
// sendRecv with `to` and `from` on different sub-transports runs the send half on a persistent
// helper thread while the calling thread receives, so a ring step that crosses hosts cannot
// deadlock. The control plane (mailbox) is the remote sub-transport's, which connects every
// pair of ranks; global rank numbers throughout. sharedSpace() is the local sub-transport's
// when every requested rank is local; peerMemory() is the local sub-transport's (peers' buffers
// can only be mapped on this host).
//
// Errors from the local sub-transport are rethrown with global rank numbers. The first
// PeerLost is remembered: later calls fail with it. abort() aborts both sub-transports, TCP
// first. Blame across hosts: a local peer that failed may only be the messenger of a rank on
// another host (its TCP abort notice names that rank), and a local wait that timed out behind a
// live peer probes the TCP peers; either way the rank named is the one the remote sub-transport
// found (Transport::culpritBehind).
//
// Threads: as Transport (transport.h). The helper thread only ever runs the send half of one
// sendRecv at a time, while the caller waits for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace hvd {

class CompositeTransport final : public Transport {
 public:
  // How long a rank that saw a local peer fail waits for that peer's TCP abort notice naming
  // the culprit (it is sent just before the shared-memory flag; a peer that died sends none, and
  // its closed connection ends the wait at once).
  static constexpr std::chrono::milliseconds kMessengerNoticeWait{300};

  // Collective over all ranks. Builds the local sub-transport first (collective among the
  // host's ranks), then the remote one (collective among all).
  explicit CompositeTransport(const TransportContext& context, const std::string& localBackend = "shm",
                              const std::string& remoteBackend = "tcp");
  ~CompositeTransport() override;
  CompositeTransport(const CompositeTransport&) = delete;
  CompositeTransport& operator=(const CompositeTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shm+tcp"; }
  std::vector<std::string> hostOf() const override { return hostOf_; }

  void send(int peer, const void* data, size_t bytes, Deadline deadline) override;
  void recv(int peer, void* data, size_t bytes, Deadline deadline) override;
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline deadline) override;
  SharedSpace* sharedSpace(const std::vector<int>& ranks, Deadline deadline) override;
  PeerMemory* peerMemory() override { return local_ ? local_->peerMemory() : nullptr; }

  void post(int peer, const void* data, size_t bytes) override;
  std::optional<MailboxMessage> poll() override;
  bool waitForMessage(Deadline deadline) override;
  void wake() override;
  void noteCulprit(int rank) override;
  void abort(const std::string& reason) override;

  // For tests: whether a local sub-transport exists, and the rank's local ranks (global ids).
  bool hasLocal() const { return local_ != nullptr; }
  const std::vector<int>& localRanks() const { return localRanks_; }

 private:
  class SpaceView;
  struct SendJob {
    Transport* transport = nullptr;
    int peer = -1;
    const void* data = nullptr;
    size_t bytes = 0;
    Deadline deadline = Deadline::never();
    std::exception_ptr error;
    bool pending = false;
  };

  bool isLocal(int peer) const { return local_ != nullptr && localIndex_[peer] >= 0; }
  Transport& route(int peer) { return isLocal(peer) ? *local_ : *remote_; }
  int subRank(int peer) const { return isLocal(peer) ? localIndex_[peer] : peer; }
  void checkPeer(int peer) const;
  void checkUsable();
  // Runs f; rethrows local-transport errors with global rank numbers and records PeerLost.
  template <typename F>
  void guarded(bool viaLocal, F&& f);
  // A local-transport PeerLost or Timeout in global rank numbers, naming the culprit the remote
  // sub-transport knows of when the local peer was only a messenger or nobody was named
  // (Transport::culpritBehind); records the first PeerLost. Other errors are returned as they are.
  std::exception_ptr translate(std::exception_ptr error, bool viaLocal);
  [[noreturn]] void rethrowTranslated(std::exception_ptr error, bool viaLocal);
  std::string globalize(const std::string& message) const;
  void helperLoop();

  int rank_;
  int size_;
  std::vector<std::string> hostOf_;
  std::vector<int> localIndex_;  // global rank -> index among this host's ranks, -1 if remote
  std::vector<int> localRanks_;  // local index -> global rank
  std::unique_ptr<Transport> local_;
  std::unique_ptr<Transport> remote_;

  std::mutex failMu_;
  std::exception_ptr failure_;  // first PeerLost / Aborted

  std::mutex helperMu_;
  std::condition_variable helperCv_;
  SendJob job_;
  bool stopHelper_ = false;
  std::thread helper_;

  std::mutex spaceMu_;
  std::map<std::vector<int>, std::unique_ptr<SpaceView>> spaces_;
};

}  // namespace hvd
