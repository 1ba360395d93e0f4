// Peer memory: buffers that other processes of this host can map, and the mapping of theirs.
//
// Two parts, because they live at different times:
//  * Shared buffers (process-wide). hvd::allocateShared (horovod.h), the Python binding's
//    `_core.shared_buffer` and the engine's output pool allocate them, before init and after
//    shutdown too, so they cannot belong to a transport. A backend that can make such memory
//    (shm) registers a SharedBufferAllocator at static initialisation, the way transports
//    register their factories; allocateSharedBuffer() falls back to ordinary memory without one.
//    findSharedBuffer() tells whether a range lies inside one, and how a peer can open it.
//  * Peer mappings (per transport): Transport::peerMemory() maps a peer's shared buffer, given
//    the SharedBufferInfo the peer published (e.g. through a SharedSpace), into this process.
//    A transport that cannot returns nullptr; so do transports whose peers are not processes of
//    this host.
// Upper layers (collectives, engine, api) use only this header; the memory tricks stay in the
// backend's folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hvd {

// Where a shared buffer lives, in terms a peer process on this host can use to map it.
// Trivially copyable: peers exchange it through shared memory. Fields other than `bytes` and
// `base` mean something only to the backend that made the buffer.
struct SharedBufferInfo {
  int64_t owner = 0;        // the owning process (its pid)
  uint64_t id = 0;          // unique in the owning process and never reused; never 0
  int64_t handle = -1;      // the backend's handle for peers to open it (shm: the memfd number)
  uint64_t bytes = 0;       // size of the whole buffer (a page multiple)
  uint8_t* base = nullptr;  // its address in the owning process
};

// Implemented by a backend that makes shared buffers; one per process. Thread-safe.
class SharedBufferAllocator {
 public:
  virtual ~SharedBufferAllocator() = default;
  // `bytes` (> 0, a page multiple) of zero-filled, page-aligned shared memory, registered for
  // find() until the last reference to the returned storage goes. Throws hvd::Error when the
  // memory cannot be shared here (the caller falls back to ordinary memory), std::bad_alloc when
  // there is no memory.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  // Whether [data, data + bytes) lies inside one live buffer of this allocator; fills `info`.
  // Must be cheap when no buffer exists: it runs at every allreduce enqueue.
  virtual bool find(const void* data, size_t bytes, SharedBufferInfo* info) const = 0;
};

// Called by the backend at static initialisation; `allocator` lives for the whole process.
void registerSharedBufferAllocator(SharedBufferAllocator* allocator);

// `bytes` (at least one page) of zero-filled memory, page aligned (so 64-byte aligned). Shared
// when a backend is registered and can share memory here; otherwise ordinary memory (never found
// by findSharedBuffer, so every collective on it takes the staged paths; a warning says so
// once). Any thread, also before init. Throws std::bad_alloc when no memory is left.
std::shared_ptr<void> allocateSharedBuffer(size_t bytes);

// Whether [data, data + bytes) lies inside one live shared buffer; fills `info` if so. bytes == 0
// is never inside. Any thread.
bool findSharedBuffer(const void* data, size_t bytes, SharedBufferInfo* info = nullptr);

// Peers' shared buffers mapped into this process (Transport::peerMemory). Owned by the
// transport; mappings may be cached until the transport goes (bounded by the backend). Used by
// the thread running the data plane, one call at a time, like send/recv.
class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  // The address in this process of the buffer `info` describes (a peer's, or this process's
  // own). `hold` keeps the mapping valid until it is reset, even if the cache drops it
  // meanwhile (empty for this process's own buffers). Throws hvd::Error when it cannot be
  // mapped.
  virtual uint8_t* map(const SharedBufferInfo& info, std::shared_ptr<void>& hold) = 0;
};

}  // namespace hvd
