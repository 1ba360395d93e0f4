// The exception hierarchy of the core. Every failure the core reports is one of these; the
// Python binding maps each class to its own Python exception (see python/horovod/common/exceptions.py):
//   InvalidArgument -> ValueError (raised synchronously, at enqueue)
//   everything else -> HorovodInternalError (a RuntimeError), PeerLost and RemovedFromJob -> its
//   subclasses.
#pragma once

#include <stdexcept>
#include <string>

namespace hvd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A bad call detected on the calling rank before anything was sent (duplicate name, bad splits,
// unknown process set, bad HOROVOD_* value, ...).
class InvalidArgument : public Error {
  using Error::Error;
};

// Ranks disagreed about an operation (shape, dtype, op, root, scale factors, join conflicts).
// Raised on every rank of the process set; the engine keeps running.
class MismatchError : public Error {
  using Error::Error;
};

// A blocking wait passed its deadline. The message names the operation and the missing peers.
class Timeout : public Error {
  using Error::Error;
};

// A peer process is gone (its connection closed, its process no longer exists).
class PeerLost : public Error {
 public:
  PeerLost(int rank, const std::string& message) : Error(message), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// The rendezvous store failed (unreachable, authentication refused, protocol error).
class StoreError : public Error {
  using Error::Error;
};

// An elastic worker's init() was told by the driver that it is no longer part of the job (its
// host was removed, or the job no longer needs it). Not a failure: the worker should exit.
class RemovedFromJob : public Error {
  using Error::Error;
};

// The engine was shut down or aborted; pending and later operations fail with this.
class Aborted : public Error {
  using Error::Error;
};

}  // namespace hvd
