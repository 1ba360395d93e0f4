// Tensor fusion: planning (coordinator) and the fusion buffer (every rank's host-memory backends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/message.h"
#include "engine/response_cache.h"

namespace hvd::engine {

struct FusionOptions {
  int64_t threshold = 0;            // bytes; 0 = no fusion
  bool disableGroupFusion = false;  // grouped ops fuse only within their own group
};

// Packs compatible single-tensor responses into fused ones: greedy from the
// front, appending later compatible responses while the fused size stays within the threshold,
// skipping incompatible ones (kept in order for later) as long as current + skipped bytes fit.
// Fusable kinds: ALLREDUCE, REDUCESCATTER, ALLGATHER. Everything else passes through unchanged,
// as do all responses when the threshold is 0.
std::vector<Response> fuseResponses(std::vector<Response> responses, const FusionOptions& options);

// The responses for a response list's ready cache hits (ResponseList::hits, ascending ids), fused
// by the same rule as fuseResponses (greedy from the lowest id, look-ahead past incompatible
// ones). Every rank runs this on its own replica with the job's options (rank 0's, shared at
// init), so all ranks derive identical responses without them travelling. The tensors point into
// `replica` (TensorInfo::ref; valid until the ids are erased) and are in cached form. Throws
// Error if an id is not in the replica (the caches went out of sync). `out` is overwritten.
void cachedResponses(const std::vector<uint32_t>& ids, const CacheReplica& replica, const FusionOptions& options,
                     std::vector<Response>& out);

// One persistent, 64-byte aligned buffer that grows to the largest size requested (at most the
// fusion threshold in practice) and is reused by every fused collective. Engine thread only.
class FusionBuffer {
 public:
  void* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace hvd::engine
