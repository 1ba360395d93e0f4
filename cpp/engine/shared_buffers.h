// Shared buffers: memory that the other ranks of this host can map, for the zero-copy shared
// in-place allreduce (engine/shared_inplace.h). hvd::allocateShared (horovod.h) and the Python
// binding `_core.shared_buffer` allocate here.
//
// Each buffer is its own anonymous memfd segment (transport/shm/segment.h): nothing has a name
// in /dev/shm; a peer opens it through /proc/<pid>/fd/<fd>, which works while this process holds
// the fd, i.e. while the buffer lives. A process-wide registry maps address ranges to segments so
// that the engine can tell, at enqueue, whether an in-place allreduce lies inside one buffer.
// Segment ids are unique in the process and never reused, so a peer may cache its mappings by
// (pid, id).
//
// Thread-safe (any thread). A buffer is unregistered, its pages discarded, unmapped and its fd
// closed when the last reference to the returned storage goes: the memory is given back at once,
// although peers that mapped it keep their (now empty) mapping in their cache until evicted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace hvd::engine {

struct SharedBufferInfo {
  uint64_t id = 0;       // process-unique segment id (never 0)
  int fd = -1;           // the memfd, open while the buffer lives
  size_t bytes = 0;      // segment size (page multiple)
  uint8_t* base = nullptr;
};

// `bytes` (at least one page) of zero-filled memory, page aligned (so 64-byte aligned). Shared
// when memfd works, otherwise ordinary memory (then never found by findSharedBuffer, and every
// allreduce on it takes the staged path). Throws std::bad_alloc when no memory is left.
std::shared_ptr<void> allocateSharedBuffer(size_t bytes);

// Whether [data, data + bytes) lies inside one registered shared buffer; fills `info` if so.
// bytes == 0 is never inside. Cheap when no buffer exists (one atomic load).
bool findSharedBuffer(const void* data, size_t bytes, SharedBufferInfo* info = nullptr);

// HOROVOD_SHARED_INPLACE: whether the zero-copy paths over shared buffers (the shared in-place
// allreduce, the shared-output allgather) may run at all.
bool sharedPathsEnabled();

// Whether an in-place allreduce over `setRanks` (global ranks) may ask for the shared in-place
// path: enabled (HOROVOD_SHARED_INPLACE), more than one member, all members on this rank's host
// (`hostOf`: per global rank; empty = one host) and a transport with shared memory.
bool sharedInPlaceUsable(const Transport& transport, const std::vector<std::string>& hostOf,
                         const std::vector<int>& setRanks);

}  // namespace hvd::engine
