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
// abort() wakes every wait (eventfd) and makes it and later calls throw Aborted, and tells every
// peer that this rank gave up (an abort frame naming the rank it blames, if any).
//
// Blame: the rank named is the one that did not answer. A data-plane deadline sends a liveness
// probe (ping) to every peer and waits for the answers: a peer that does not answer
// within 0.5 s (stopped, hung, its host unreachable) is named in a PeerLost; when all answer, the
// error is a Timeout naming the op and peer (slow, or the ranks diverged). A peer that gave up
// itself is not the culprit: its abort frame names the rank it blames, and that rank is named
// (a rank blamed by its peers says that it did not answer, instead of blaming them). Data waits
// read the control connections, so a rank answers probes and learns of aborts while it waits.
// After a deadline the stream is unusable (Error).
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/socket.h"
#include "horovod/errors.h"
#include "transport/tcp/control_frame.h"
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
  // The launcher's host of every rank (TransportContext::hostOf): collectives that depend on
  // placement (the GPU Adasum's hosts, a GPU shared by ranks of one host) must see ranks on
  // different hosts as such even when TCP carries everything.
  std::vector<std::string> hostOf() const override { return hostOf_; }

  void send(int peer, const void* data, size_t bytes, Deadline deadline) override;
  void recv(int peer, void* data, size_t bytes, Deadline deadline) override;
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline deadline) override;

  void post(int peer, const void* data, size_t bytes) override;
  std::optional<MailboxMessage> poll() override;
  bool waitForMessage(Deadline deadline) override;
  void wake() override;
  void abort(const std::string& reason) override;
  void noteCulprit(int rank) override;
  // Latches what it finds (as a data-plane deadline would): the rank is failing anyway.
  std::exception_ptr culpritBehind(int peer, const std::string& context, std::chrono::milliseconds window) override;

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
    std::atomic<bool> gaveUp{false};  // sent an abort frame (guarded by ctrlMu_: blamed, gaveUpReason)
    int blamed = -1;                  // the rank it blamed, -1 if none
    std::string gaveUpReason;
    std::atomic<uint32_t> pongs{0};  // answers to our liveness probes
    // Keep-alive while waiting for messages (ctrlMu_): when the oldest unanswered ping went out.
    std::chrono::steady_clock::time_point pingSentAt{};
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

  // After a data-plane deadline, how long peers get to answer the liveness probe. A live peer's
  // transport answers from any wait within milliseconds; the window also gives a peer that timed
  // out at about the same moment the time to send its abort frame naming whom it blames.
  static constexpr std::chrono::milliseconds kProbeWindow{500};

  // Control frame kinds and header size (control_frame.h).
  static constexpr uint8_t kFrameMessage = control_frame::kMessage;
  static constexpr uint8_t kFrameGoodbye = control_frame::kGoodbye;
  static constexpr uint8_t kFrameAbort = control_frame::kAbort;
  static constexpr uint8_t kFramePing = control_frame::kPing;
  static constexpr uint8_t kFramePong = control_frame::kPong;
  static constexpr size_t kFrameHeader = control_frame::kHeaderBytes;

  void checkPeer(int peer, const char* op) const;
  // Throws Aborted or the recorded PeerLost; with dataPlane also the broken-stream Error.
  void checkUsable(bool dataPlane);
  [[noreturn]] void throwAborted();
  [[noreturn]] void lost(int peer, const std::string& why);
  // Latches and throws PeerLost(culprit, message, peerAborted) (first failure wins).
  [[noreturn]] void fail(int culprit, const std::string& message, bool peerAborted = false);
  // After a data-plane deadline: pings every peer and waits up to the probe window. Returns a
  // peer that gave up (its abort frame read), else -1 with `silent` set to a peer that did not
  // answer (preferring one of `preferred`), or -1 when all answered.
  int probePeers(const std::vector<int>& preferred, int& silent);
  // probePeers' parts: a ping to every peer still connected (each one's pong count before it);
  // whether peer r was asked and has not answered (nor departed); the wait for the answers, until
  // all came, a peer gave up, this transport was aborted, or the probe window passed.
  struct Probe {
    std::vector<uint32_t> pongsBefore;
    std::vector<char> asked;
  };
  Probe sendProbes();
  bool unanswered(const Probe& probe, int r) const;
  void awaitProbeAnswers(const Probe& probe);
  // Reads `peer`'s control connection until its abort notice arrived, it closed, or `until`
  // (ctrlMu_ not held). Returns whether it gave up.
  bool awaitAbortNotice(int peer, Deadline until);
  // A peer that gave up; -1 if none (ctrlMu_ not held).
  int peerThatGaveUp();
  // waitForMessage's keep-alive: pings peers every quarter of the timeout; throws PeerLost for a
  // peer whose ping stayed unanswered for the whole timeout (called with all input read).
  void keepAlive(std::chrono::steady_clock::time_point now);
  // waitForMessage's parts: the poll set (mailFds_/mailOwners_: abort, wake, every open control
  // connection, the data sockets' hang-ups); the poll timeout (the deadline's, shortened to the
  // next keep-alive round); and what poll reported, served under ctrlMu_ (control frames read
  // and flushed, the wake drained) and returned for the caller to act on outside the lock.
  struct MailEvents {
    bool woke = false;
    int lostPeer = -1;  // the first peer whose control connection failed, and why
    std::string why;
    std::vector<std::pair<int, short>> dataHangups;  // (peer, revents)
  };
  void fillMailPollSet();
  int mailWaitMs(Deadline deadline) const;
  MailEvents serveMailPollSet();
  std::string describePeer(int peer) const;

  // Data plane.
  void transfer(Leg* legs, int count, Deadline deadline, const char* op);
  // transfer()'s parts: the poll set (dataFds_/dataOwners_: abort, the legs' data sockets, the
  // other peers' hang-ups and control connections); at the deadline, the Timeout naming what
  // was left, or PeerLost for a peer that did not answer a probe either (always throws); the
  // events poll reported (abort, hang-ups, control input and output).
  void fillTransferPollSet(const Leg* legs, int count);
  [[noreturn]] void failTransferTimeout(const Leg* legs, int count, const char* op, Deadline::Clock::time_point start);
  void serveTransferPollSet(const Leg* legs, int count);
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
  std::vector<std::string> hostOf_;
  std::vector<Peer> peers_;  // indexed by rank; own entry unused

  Socket abortFd_;  // eventfd: readable once aborted (never drained)
  Socket wakeFd_;   // eventfd: wake(); drained by waitForMessage
  std::atomic<bool> wakePending_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};
  std::mutex stateMu_;  // guards the texts below
  std::string abortReason_;
  int lostRank_ = -1;
  bool lostAborted_ = false;  // lostRank_ sent an abort frame (PeerLost::peerAborted())
  std::atomic<int> blameRank_{-1};  // the rank this one found silent or lost (for the abort frame)
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
  std::chrono::steady_clock::time_point nextKeepAlive_{};  // controller thread
  std::vector<PollOwner> mailOwners_;
};

}  // namespace hvd::tcp
