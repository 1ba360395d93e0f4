// Transport: how the ranks of one job move bytes. A transport is built once per job (at init)
// over the global ranks; process sets use it through a Communicator (collectives/communicator.h).
//
// Two planes:
//  * Data plane: FIFO byte streams between every ordered pair of ranks (send/recv/sendRecv).
//    Blocking, with a deadline. Used only by the thread running the engine, one call at a time.
//    Because every rank executes the same ordered list of collectives, streams need no tags.
//  * Control plane (Mailbox): message-oriented, used by the controller for negotiation. A rank
//    waits for "a message from anyone, or local work" without a fixed sleep: wake() (callable
//    from any thread, e.g. at enqueue) interrupts wait().
//
// Failure contract: a blocking call that finds any peer dead throws PeerLost naming that peer's
// global rank, within a few seconds of the death (transports watch all peers while waiting, not
// only the one being waited on). abort() makes every current and later blocking call throw
// Aborted; it is callable from any thread.
//
// Transports know bytes, peers and deadlines; never dtypes or tensors.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "store/store.h"

namespace hvd {

class PeerMemory;  // transport/peer_memory.h

// Shared-memory capability of a group of ranks on one host (see Transport::sharedSpace).
// Each member owns one buffer of capacity() bytes that every member can read and write.
// Buffers persist for the transport's lifetime; no allocation per operation.
class SharedSpace {
 public:
  virtual ~SharedSpace() = default;
  // Members, as global ranks in ascending order; indices below are positions in this list.
  virtual const std::vector<int>& members() const = 0;
  virtual int memberIndex() const = 0;  // this rank's position in members()
  virtual size_t capacity() const = 0;
  virtual void* buffer(int memberIndex) = 0;
  // Synchronizes all members (full memory fence). Watches for dead members like other waits.
  virtual void barrier(Deadline deadline) = 0;
  // Progress flag, for algorithms that stream through a buffer (one member fills it piece by
  // piece while the others copy each piece as soon as it is there): publish() makes this
  // member's writes before it visible together with `value` (release) and wakes members waiting
  // on it; awaitPublished() returns once member `memberIndex` has published at least `value`
  // (acquire). The values a member publishes only grow. Waits watch for dead members and the
  // deadline like barrier(). Neither is a barrier: buffer reuse still needs one per phase.
  virtual void publish(uint64_t value) = 0;
  virtual void awaitPublished(int memberIndex, uint64_t value, Deadline deadline) = 0;

  // Double-buffering phase for the algorithms that use this space (collectives/partition.h):
  // every chunk they pass through the space takes the next phase. It lives with the space, not
  // with a Communicator, because communicators of different process sets may get the same space
  // (transports cache spaces by member list); every member advances it identically since they
  // run the same collectives in the same order. Background thread only.
  uint64_t nextPhase() { return phase_++; }

 private:
  uint64_t phase_ = 0;
};

struct MailboxMessage {
  int from = -1;  // global rank of the sender
  std::vector<uint8_t> bytes;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "tcp", "shm", "shm+tcp", "local"
  // Host identity of every global rank (equal strings = same host), or empty when the transport
  // does not distinguish hosts (every rank then counts as being on one host). Collectives use it
  // to choose hierarchical algorithms: shared memory inside a host, point-to-point across.
  virtual std::vector<std::string> hostOf() const { return {}; }

  // ---- Data plane -------------------------------------------------------------------------
  virtual void send(int peer, const void* data, size_t bytes, Deadline deadline) = 0;
  virtual void recv(int peer, void* data, size_t bytes, Deadline deadline) = 0;
  // Sends to `to` and receives from `from` concurrently, so ring steps cannot deadlock on
  // buffer space. Either size may be zero; `to` and `from` may be equal.
  virtual void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                        Deadline deadline) = 0;

  // Shared memory among `ranks` (ascending global ranks, all on this host, including this rank),
  // or nullptr when this transport cannot provide it. Created collectively on first request:
  // every member must ask for the same list at the same point of the collective order.
  virtual SharedSpace* sharedSpace(const std::vector<int>& ranks, Deadline deadline) {
    (void)ranks;
    (void)deadline;
    return nullptr;
  }

  // Mapping of peers' shared buffers (transport/peer_memory.h), or nullptr when this transport
  // cannot map them (its peers are not processes of this host, or it has no shared memory).
  // Owned by the transport. This accessor may be called from any thread; the PeerMemory itself
  // only by the data-plane thread.
  virtual PeerMemory* peerMemory() { return nullptr; }

  // ---- Control plane ----------------------------------------------------------------------
  // Queues a message to `peer`; returns once it is handed to the transport (does not wait for
  // the peer to read it). Messages from one sender to one receiver arrive in order.
  virtual void post(int peer, const void* data, size_t bytes) = 0;
  // Returns the next received message if any, without blocking.
  virtual std::optional<MailboxMessage> poll() = 0;
  // Blocks until a message may be available, wake() was called, or the deadline passed.
  // Returns false only on deadline. Spurious returns are allowed.
  virtual bool waitForMessage(Deadline deadline) = 0;
  // Interrupts waitForMessage(); thread-safe.
  virtual void wake() = 0;

  // ---- Failure ----------------------------------------------------------------------------
  virtual void abort(const std::string& reason) = 0;
  // Before abort(): the rank this one's failure is blamed on (a lost or silent peer, or this
  // rank), so that a transport that tells its peers about the abort can name it. Optional.
  virtual void noteCulprit(int rank) { (void)rank; }
  // Blame help for a sibling transport of this rank (the composite's shared memory inside a
  // host), called by the data-plane thread after a wait there failed; `context` is that
  // failure's message (global rank numbers):
  //  * peer >= 0: global rank `peer` failed there (aborted, or is gone). If it gave up here too,
  //    with an abort notice naming the rank it blames (awaited up to `window`), returns PeerLost
  //    naming that rank: `peer` was only the messenger.
  //  * peer < 0: the wait timed out behind a live peer (which may itself wait on a silent rank
  //    elsewhere). Probes this transport's peers as after a data-plane deadline of its own and
  //    returns PeerLost naming the rank a peer that gave up blames, or a peer that does not answer.
  // Returns nullptr when it learns nothing. Optional: the default learns nothing.
  virtual std::exception_ptr culpritBehind(int peer, const std::string& context, std::chrono::milliseconds window) {
    (void)peer;
    (void)context;
    (void)window;
    return nullptr;
  }
};

// What a transport factory gets at init. Everything a backend needs to connect.
struct TransportContext {
  int rank = 0;
  int size = 1;
  // Host identity of every rank (HOROVOD_HOSTNAME as given by the launcher); equal strings mean
  // the same host, so shared memory is possible between them.
  std::vector<std::string> hostOf;
  std::shared_ptr<Store> store;  // already namespaced for this transport and job
  std::string jobId;             // unique per job and init round; names shm segments
  std::string secret;            // per-job secret: TCP peers prove knowledge of it (HMAC)
  std::string bindAddress;       // IP to listen on for TCP ("" = derive from interface/any)
  std::string interface;         // network interface name (HOROVOD_GLOO_IFACE), optional
  // An address every rank reaches (the rendezvous server's), optional: across hosts, with no
  // bindAddress nor interface, a rank publishes its own address on the route there.
  std::string reachableAddress;
  std::chrono::milliseconds timeout{30000};  // connection setup and default op timeout
};

using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportContext&)>;

// Registry of transport backends by name ("tcp", "shm", "local", ...). Backends register
// themselves from their own folder (a static registrar in the backend's object library).
void registerTransport(const std::string& name, TransportFactory factory);
bool hasTransport(const std::string& name);
std::vector<std::string> transportNames();
// Builds the named transport; "auto" picks shm when every rank is on this host, tcp when each
// host has one rank, and the composite (shm inside a host, tcp across) otherwise.
std::unique_ptr<Transport> makeTransport(const std::string& name, const TransportContext& context);

}  // namespace hvd
