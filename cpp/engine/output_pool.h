// OutputPool: storage for the tensors the engine allocates per operation (allgather and alltoall
// outputs, whose size is known only after negotiation).
//
// Why: a fresh large allocation is fresh pages, and on this kind of host (a VM) every first touch
// of a 4 KiB page costs ~7-10 us: a 16 MiB output costs ~30 ms of page faults, far more than
// moving its bytes. The pool therefore
//   - maps blocks of >= 2 MiB 2 MiB-aligned and asks for transparent huge pages (one fault per
//     2 MiB instead of 512 when the kernel grants them), and
//   - keeps released blocks mapped (and resident) for reuse, up to a byte budget
//     (HOROVOD_OUTPUT_POOL_BYTES); the oldest cached blocks are unmapped first when it is
//     exceeded, and a block larger than the budget is unmapped at once.
// A steady loop (allgather of the same size every step, the previous output dropped after the
// next one is returned) thus reuses one cached block and faults nothing.
//
// Requests below kMinPooledBytes go to the C heap (glibc keeps small blocks cached itself).
// Memory is not zeroed.
//
// Shared blocks (acquire(bytes, /*shared=*/true)) are shared buffers (transport/peer_memory.h)
// that the other ranks of the host can map, so that a collective can write its result straight
// into every rank's output (the allgather "shm_outputs"). They are cached like the others, apart
// from them, and only handed out when they fit the budget: a fresh shared block costs a page
// fault per 4 KiB page (no huge pages for shared memory) in its owner and again in every peer
// that maps it, so only a block that will be reused is worth it; others get a private block.
//
// Ownership: the Runtime's HostResources hold one pool (made with std::make_shared), lent to the
// host-memory backends. Every block it hands out holds the pool too, so a block may be released
// after the engine is gone (user threads, Python's GC, even during exit). close() at shutdown
// unmaps the cached blocks, and blocks released later are unmapped at once: nothing stays
// cached past the runtime.
//
// Thread-safe: acquire() runs on the thread running the engine; the storage's deleter runs on
// whichever thread drops the last reference.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "common/params.h"
#include "horovod/operation.h"

namespace hvd::engine {

// HOROVOD_OUTPUT_POOL_BYTES: bytes of released outputs kept mapped for reuse (default 16 MiB).
const Param<int64_t>& outputPoolBytesParam();

class OutputPool : public std::enable_shared_from_this<OutputPool> {
 public:
  static constexpr size_t kMinPooledBytes = size_t(256) << 10;
  static constexpr size_t kHugePage = size_t(2) << 20;

  explicit OutputPool(size_t budget) : budget_(budget) {}
  ~OutputPool();
  OutputPool(const OutputPool&) = delete;
  OutputPool& operator=(const OutputPool&) = delete;

  // At least `bytes` bytes (at least 1), 64-byte aligned, not zeroed. The memory returns to the
  // pool (or to the system) when the last copy of the returned pointer goes; pooled blocks keep
  // the pool alive (it must be owned by a std::shared_ptr). `shared`: a shared buffer when the
  // request is at least
  // kMinPooledBytes and its block fits the budget (else an ordinary block). Throws
  // std::bad_alloc.
  std::shared_ptr<void> acquire(size_t bytes, bool shared = false);

  size_t budget() const { return budget_; }
  // Bytes of released blocks kept mapped now.
  size_t cachedBytes() const;
  // Blocks mapped from the system so far (a reused block is not counted again), for tests.
  size_t blocksMapped() const;
  // Unmaps every cached block.
  void trim();
  // trim(), and from now on blocks released are unmapped instead of cached.
  void close();

 private:
  struct Block {
    void* base = nullptr;          // the mapping
    size_t capacity = 0;           // its length
    std::shared_ptr<void> shared;  // a shared block's buffer (base is its start); else empty
  };
  struct Release;
  void release(Block block);
  static Block mapBlock(size_t capacity, bool shared);
  static void unmapBlock(Block& block);

  const size_t budget_;
  mutable std::mutex mutex_;
  std::vector<Block> cached_;  // oldest first
  size_t cachedBytes_ = 0;
  size_t blocksMapped_ = 0;
  bool closed_ = false;
};

// Engine-allocated tensor storage from `pool` (64-byte aligned; at least one byte so data is
// never null). `shared`: from the pool's shared blocks when it can (OutputPool::acquire).
OwnedTensor allocateTensor(OutputPool& pool, DataType dtype, std::vector<int64_t> shape, bool shared = false);

}  // namespace hvd::engine
