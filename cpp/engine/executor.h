// Executor: runs one agreed response on this rank through its process set's Communicator.
//
// Copies are kept to the minimum: a single allreduce is reduced in place in the caller's output
// buffer (one input->output copy when not in place); fused responses go through the persistent
// fusion buffer (copy in, one collective, copy out). Only allgather/alltoall outputs are
// allocated per operation (their size is known only after negotiation).
//
// Engine thread only (whoever runs the engine: runtime.h). Transport/collective failures propagate as thrown hvd::Errors.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "collectives/collectives.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/process_set_table.h"
#include "engine/tensor_queue.h"

namespace hvd::engine {

class OutputPool;

class Executor {
 public:
  Executor();
  ~Executor();

  // Runs `response` (any data kind: allreduce, allgather, broadcast, alltoall, reducescatter,
  // barrier) on `set`, of which this rank is a member. entries[i] is this rank's entry for
  // response.tensors[i], or nullptr when this rank did not request it (a joined rank: it takes
  // part with zeros). Engine-allocated outputs and received splits are stored in the entries'
  // works; completing the works is the caller's job.
  void run(const Response& response, ProcessSet& set, const std::vector<Entry*>& entries);

  size_t fusionBufferBytes() const { return fusion_.capacity(); }
  // Operations that ran over the members' shared outputs (the allreduce "shm_inplace", the
  // allgather "shm_outputs"), and blocks the output pool mapped so far. Any thread.
  uint64_t sharedInPlaceOps() const { return sharedInPlaceOps_.load(std::memory_order_relaxed); }
  uint64_t sharedAllgatherOps() const { return sharedAllgatherOps_.load(std::memory_order_relaxed); }
  size_t outputBlocksMapped() const;
  // At shutdown: gives the output pool's cached blocks back (outputs still held stay valid).
  void releaseOutputs();

 private:
  void allreduce(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void allgather(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);

  FusionBuffer fusion_;
  std::vector<collectives::Piece> pieces_;  // a fused allreduce's tensors (scratch)
  std::shared_ptr<OutputPool> outputs_;      // allgather/alltoall outputs (engine/output_pool.h)
  std::atomic<uint64_t> sharedInPlaceOps_{0};
  std::atomic<uint64_t> sharedAllgatherOps_{0};
};

// Rows of dim 0 that set rank `r` of `n` gets in a reducescatter of `rows` rows (semantics §8.4).
inline int64_t reducescatterRows(int64_t rows, int n, int r) { return rows / n + (r < rows % n ? 1 : 0); }

// Engine-allocated tensor storage from `pool` (64-byte aligned; at least one byte so data is
// never null). `shared`: from the pool's shared blocks when it can (OutputPool::acquire).
OwnedTensor allocateTensor(OutputPool& pool, DataType dtype, std::vector<int64_t> shape, bool shared = false);

}  // namespace hvd::engine
