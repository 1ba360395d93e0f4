// The exception hierarchy of the core. Every failure the core reports is one of these; the
// Python binding maps each class to its own Python exception (see python/horovod/common/exceptions.py):
//   InvalidArgument -> ValueError (raised synchronously, at enqueue)
//   everything else -> HorovodInternalError (a RuntimeError), PeerLost and RemovedFromJob -> its
//   subclasses.
//
// Every Error carries an ErrorCode: code that must tell failures apart (across the ApiTable, in
// the Python binding) tests the code, never the message text.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hvd {

// What went wrong, as a value. Each class below has its own code; kNotInitialized marks the
// "Horovod has not been initialized" failure, raised as InvalidArgument by the queries (rank(),
// size(), ...) and as Error by the collectives. The numeric values are part of the binding ABI
// (python/horovod/common/exceptions.py mirrors them as ErrorCode); append, never renumber.
enum class ErrorCode : uint8_t {
  kInternal = 0,  // a plain Error: any other failure
  kInvalidArgument = 1,
  kMismatch = 2,
  kTimeout = 3,
  kPeerLost = 4,
  kStore = 5,
  kRemovedFromJob = 6,
  kAborted = 7,
  kNotInitialized = 8,
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ErrorCode code = ErrorCode::kInternal)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

  // The rank whose engine relayed this failure to this rank, or -1: this rank hit it itself. A
  // relayed failure's message starts with "[from rank N] " for people; code reads this field.
  int relayedFrom() const { return relayedFrom_; }
  // Set by the engine when it rethrows a peer's failure notice.
  void setRelayedFrom(int rank) { relayedFrom_ = rank; }

 private:
  ErrorCode code_;
  int relayedFrom_ = -1;
};

// A bad call detected on the calling rank before anything was sent (duplicate name, bad splits,
// unknown process set, bad HOROVOD_* value, ...).
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message, ErrorCode code = ErrorCode::kInvalidArgument)
      : Error(message, code) {}
};

// Ranks disagreed about an operation (shape, dtype, op, root, scale factors, join conflicts).
// Raised on every rank of the process set; the engine keeps running.
class MismatchError : public Error {
 public:
  explicit MismatchError(const std::string& message) : Error(message, ErrorCode::kMismatch) {}
};

// A blocking wait passed its deadline. The message names the operation and the missing peers.
class Timeout : public Error {
 public:
  explicit Timeout(const std::string& message) : Error(message, ErrorCode::kTimeout) {}
};

// A peer process is gone (its connection closed, its process no longer exists).
class PeerLost : public Error {
 public:
  // `peerAborted`: the lost rank announced that it aborted its transport (it gave up, most likely
  // because of a third rank, and may still be alive) rather than vanished without notice (its
  // process exited or was killed, its connection closed, it stopped answering).
  PeerLost(int rank, const std::string& message, bool peerAborted = false)
      : Error(message, ErrorCode::kPeerLost), rank_(rank), peerAborted_(peerAborted) {}
  int rank() const { return rank_; }
  bool peerAborted() const { return peerAborted_; }

 private:
  int rank_;
  bool peerAborted_;
};

// The rendezvous store failed (unreachable, authentication refused, protocol error).
class StoreError : public Error {
 public:
  explicit StoreError(const std::string& message) : Error(message, ErrorCode::kStore) {}
};

// An elastic worker's init() was told by the driver that it is no longer part of the job (its
// host was removed, or the job no longer needs it). Not a failure: the worker should exit.
class RemovedFromJob : public Error {
 public:
  explicit RemovedFromJob(const std::string& message) : Error(message, ErrorCode::kRemovedFromJob) {}
};

// The engine was shut down or aborted; pending and later operations fail with this.
class Aborted : public Error {
 public:
  explicit Aborted(const std::string& message) : Error(message, ErrorCode::kAborted) {}
};

}  // namespace hvd
