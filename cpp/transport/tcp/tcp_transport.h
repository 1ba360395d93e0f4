// TcpTransport: the Transport over TCP, for ranks on different hosts (or anywhere, as the
// fallback). Registered as "tcp".
//
// Setup (constructor, collective, bounded by context.timeout): tcp_mesh.h — two authenticated
// connections per pair of ranks, data plane and control plane.
//
// Data plane: send/recv/sendRecv move bytes straight between the caller's buffer and the
// socket (non-blocking sockets + poll(); no copies, no allocation per call). sendRecv
// progresses both directions in one loop. A self-send goes through an in-process buffer.
//
// Control plane: a message is a frame (u32 length | u8 kind | payload) on the peer's control
// connection. post() writes what the socket takes and keeps the rest in a per-peer outbox that
// every later call of this transport (data waits included) keeps flushing, so it never blocks.
//
// Threads: the data plane is used by one thread at a time (the thread running the engine).
// post() may be called from any thread; poll()/waitForMessage() from one controller thread at
// a time (may be the data thread); wake() and abort() from any thread.
//
// Failure: every wait also watches every peer's connections for hang-up/error. A peer whose
// connection closes without a goodbye (killed, crashed) makes the current and every later
// blocking call throw PeerLost naming it: "Horovod lost connection to rank R (host H): ...".
// The destructor says goodbye first (unless aborted or failed), so a rank that shuts down
// cleanly is not reported as lost; an operation that still needs it fails with PeerLost.
// abort() wakes every wait (eventfd) and makes it and later calls throw Aborted. A data-plane
// deadline throws Timeout naming the op and peer; the stream is then unusable (Error).
#pragma once

#include <poll.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/socket.h"
#include "horovod/errors.h"
#include "transport/transport.h"

namespace hvd::tcp {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportContext& context);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "tcp"; }

  void send(int peer, const void* data, size_t bytes, Deadline deadline) override;
  void recv(int peer, void* data, size_t bytes, Deadline deadline) override;
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline deadline) override;

  void post(int peer, const void* data, size_t bytes) override;
  std::optional<MailboxMessage> poll() override;
  bool waitForMessage(Deadline deadline) override;
  void wake() override;
  void abort(const std::string& reason) override;

  // The address this rank listened on during setup, and how many connection attempts it
  // refused for failing authentication (for tests and logs).
  const std::string& listenAddress() const { return listenAddress_; }
  int64_t refusedConnections() const { return refused_; }

 private:
  struct Peer {
    Socket data;
    Socket ctrl;
    std::string host;
    std::atomic<bool> departed{false};  // said goodbye: closing its connections is not a loss
    std::atomic<bool> ctrlClosed{false};
    std::atomic<bool> dataClosed{false};
    // Control plane, guarded by ctrlMu_.
    std::vector<uint8_t> in;
    size_t inStart = 0;
    std::vector<uint8_t> out;
    size_t outStart = 0;
  };
  // One direction of a data-plane operation.
  struct Leg {
    int peer = -1;
    bool isSend = false;
    uint8_t* ptr = nullptr;
    size_t left = 0;
    size_t total = 0;
  };
  enum class PollKind : uint8_t { kAbort, kWake, kData, kCtrl };
  struct PollOwner {
    PollKind kind;
    int peer;
  };

  static constexpr uint8_t kFrameMessage = 1;
  static constexpr uint8_t kFrameGoodbye = 2;
  static constexpr size_t kFrameHeader = 5;  // u32 payload length | u8 kind

  void checkPeer(int peer, const char* op) const;
  // Throws Aborted or the recorded PeerLost; with dataPlane also the broken-stream Error.
  void checkUsable(bool dataPlane);
  [[noreturn]] void throwAborted();
  [[noreturn]] void lost(int peer, const std::string& why);
  std::string describePeer(int peer) const;

  // Data plane.
  void transfer(Leg* legs, int count, Deadline deadline, const char* op);
  void progress(Leg& leg, const char* op);
  void selfSend(const void* data, size_t bytes);
  void selfRecv(void* data, size_t bytes);

  // Control plane (ctrlMu_ held unless noted).
  void appendFrame(Peer& p, uint8_t kind, const void* data, size_t bytes);
  // Writes what it can; returns "" or an error text if the connection failed.
  std::string flushLocked(Peer& p);
  // Reads what is available and parses frames into inbox_; returns "" or why the peer is lost.
  std::string readControlLocked(int peer);
  // Not locked: reacts to a hang-up seen on one of peer's sockets (from any wait). Throws
  // PeerLost unless the peer said goodbye.
  void onHangup(int peer, bool onData, short revents);
  void flushAllControl();  // not locked; try-locks

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string listenAddress_;
  int64_t refused_ = 0;
  std::vector<Peer> peers_;  // indexed by rank; own entry unused

  Socket abortFd_;  // eventfd: readable once aborted (never drained)
  Socket wakeFd_;   // eventfd: wake(); drained by waitForMessage
  std::atomic<bool> wakePending_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};
  std::mutex stateMu_;  // guards the texts below
  std::string abortReason_;
  int lostRank_ = -1;
  std::string lostMessage_;
  std::string brokenMessage_;  // data thread only

  // Data thread.
  std::vector<pollfd> dataFds_;
  std::vector<PollOwner> dataOwners_;
  std::vector<uint8_t> selfData_;  // self-sends not yet received
  size_t selfStart_ = 0;

  // Control plane.
  std::mutex ctrlMu_;
  std::deque<MailboxMessage> inbox_;
  std::atomic<int> outPending_{0};  // peers with unflushed control bytes
  std::vector<pollfd> mailFds_;     // controller thread
  std::vector<PollOwner> mailOwners_;
};

}  // namespace hvd::tcp
