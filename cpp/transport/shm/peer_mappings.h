// PeerMappings: the shm transport's PeerMemory (transport/peer_memory.h). Maps the shared buffers
// of other processes of this host (ShmSharedBuffers, shared_buffers.h) through
// /proc/<pid>/fd/<fd>, and keeps the mappings for reuse by (pid, segment id): segment ids are
// never reused within a process, so a cached mapping never stands for another buffer. The least
// recently used mapping beyond kMaxMappings is unmapped. A buffer of this process maps to its own
// address.
//
// Owned by ShmTransport: every mapping goes with the transport (at shutdown). Data-plane thread
// only (one call at a time), like send/recv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "transport/peer_memory.h"

namespace hvd::shm {

class Segment;

class PeerMappings final : public PeerMemory {
 public:
  static constexpr size_t kMaxMappings = 256;

  uint8_t* map(const SharedBufferInfo& info, std::shared_ptr<void>& hold) override;

 private:
  struct Mapping {
    std::shared_ptr<Segment> segment;
    uint64_t lastUse;
  };
  void evictOldest();

  std::map<std::pair<int64_t, uint64_t>, Mapping> map_;
  uint64_t clock_ = 0;
};

}  // namespace hvd::shm
