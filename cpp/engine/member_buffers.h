// MemberBuffers: every member's buffer of one operation, mapped into this process, for the
// zero-copy paths over shared buffers (engine/shared_buffers.h): the shared in-place allreduce
// (each member reduces its slice straight inside everyone's buffer) and the shared-output
// allgather (each member writes its block straight into everyone's output).
//
// Protocol of map() (every member, same point of the collective order, one SharedSpace phase):
//  1. publish a small descriptor of this rank's buffer (pid, memfd, segment id, offset, bytes;
//     id 0 = not a shared buffer) in this rank's half of the set's SharedSpace, plus the peer
//     segments it mapped in its last operation on this communicator; barrier (full fence: it also
//     publishes the buffers' contents). If any member has no shared buffer, or the sizes differ,
//     every member returns false here, before anything is mapped.
//  2. map every peer's segment (cached per process by (pid, segment id), least recently used
//     unmapped beyond a bound), publish ok/failed; barrier; if any member failed, every member
//     returns false. Skipped in the steady state: when every member already mapped every peer's
//     current segment in its last operation, all proceed at once.
// After a true return the caller works on buffer(j) for every member j, then ends with a barrier
// of its own (the space's phase stays reserved until then) and calls release().
//
// Every wait is a SharedSpace barrier with the communicator's deadline, which watches the peers:
// a dead peer gives PeerLost, never a hang. Engine thread only (runtime.h); one instance per
// thread is enough (no allocation per call in the steady state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"

namespace hvd::shm {
class Segment;
}

namespace hvd::engine {

class MemberBuffers {
 public:
  // `mine`: this rank's buffer of `bytes` for the operation, or nullptr when it has none (then
  // every member returns false). `what` names the operation in warnings and errors. Throws
  // PeerLost/Timeout like the collectives, and Aborted when a segment mapped before cannot be
  // mapped again (the peers are already working on the buffers).
  bool map(Communicator& comm, SharedSpace& space, uint64_t phase, void* mine, size_t bytes, const char* what);

  // Member j's buffer in this process (valid after a true map() until release()).
  uint8_t* buffer(int j) const { return buffers_[static_cast<size_t>(j)]; }
  uint8_t* const* buffers() const { return buffers_.data(); }

  // Drops this operation's hold on the peers' mappings (the cache keeps them).
  void release();

  // Bytes of the SharedSpace half that map() needs for `n` members.
  static size_t controlBytes(int n);

 private:
  std::vector<uint8_t*> buffers_;
  std::vector<std::shared_ptr<shm::Segment>> holds_;
};

}  // namespace hvd::engine
