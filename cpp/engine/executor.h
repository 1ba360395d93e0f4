// Executor: runs one agreed response on this rank through its process set's Communicator.
//
// Copies are kept to the minimum: a single allreduce is reduced in place in the caller's output
// buffer (one input->output copy when not in place); fused responses go through the persistent
// fusion buffer (copy in, one collective, copy out). Only allgather/alltoall outputs are
// allocated per operation (their size is known only after negotiation).
//
// Engine thread only (whoever runs the engine: runtime.h). Transport/collective failures propagate as thrown hvd::Errors.
#pragma once

#include <vector>

#include "collectives/collectives.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/observer.h"
#include "engine/process_set_table.h"
#include "engine/tensor_queue.h"

namespace hvd::engine {

class Executor {
 public:
  Executor() = default;

  // Runs `response` (any data kind: allreduce, allgather, broadcast, alltoall, reducescatter,
  // barrier) on `set`, of which this rank is a member. entries[i] is this rank's entry for
  // response.tensors[i], or nullptr when this rank did not request it (a joined rank: it takes
  // part with zeros). Engine-allocated outputs and received splits are stored in the entries'
  // works; completing the works is the caller's job.
  void run(const Response& response, ProcessSet& set, const std::vector<Entry*>& entries);

  size_t fusionBufferBytes() const { return fusion_.capacity(); }
  // Where fusion-copy and collective events go (observer.h); `hub` outlives the executor.
  void setObservers(const ObserverHub* hub) { observers_ = hub; }

 private:
  bool watching(EngineEventKind kind) const { return observers_->wants(kind); }
  // Publishes `kind` for response `r`; timeNs 0 = now.
  void notify(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm, int64_t timeNs = 0) const;
  // After an allreduce of `bytes` ran on `comm`: its start (when `startNs` is set: for paths that
  // decide only as they run whether they apply) and end events, naming the algorithm.
  void allreduceRan(const Response& r, Communicator& comm, size_t bytes, int64_t startNs,
                    const char* algorithm = nullptr) const;
  void allreduce(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void allgather(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);

  FusionBuffer fusion_;
  std::vector<collectives::Piece> pieces_;
  const ObserverHub* observers_ = &ObserverHub::none();  // a fused allreduce's tensors (scratch)
};

// Rows of dim 0 that set rank `r` of `n` gets in a reducescatter of `rows` rows (semantics §8.4).
inline int64_t reducescatterRows(int64_t rows, int n, int r) { return rows / n + (r < rows % n ? 1 : 0); }

// Engine-allocated tensor storage (64-byte aligned; at least one byte so data is never null).
// `shared`: from the OutputPool's shared blocks when it can (OutputPool::acquire).
OwnedTensor allocateTensor(DataType dtype, std::vector<int64_t> shape, bool shared = false);

}  // namespace hvd::engine
