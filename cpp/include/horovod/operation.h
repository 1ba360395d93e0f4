// What one collective operation is made of: its tensors (TensorView, OwnedTensor), its settings
// (Options) and its outcome (Work). Shared by the public API (horovod.h), which declares the
// operations, and the core, which implements them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "horovod/types.h"

namespace hvd {

// A buffer with a dtype, a shape and the device it lives on (host memory by default). Does not
// own its memory; the caller keeps it alive until the operation that uses it has completed.
// Collectives on a device other than the CPU need a collective backend for that device in this
// build; without one they throw InvalidArgument naming the device.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  Device device;

  int64_t numElements() const;
  size_t bytes() const { return static_cast<size_t>(numElements()) * dataTypeSize(dtype); }
};

// A tensor allocated by the engine (outputs whose size is only known after negotiation:
// allgather, alltoall). The storage is released when the last copy of this object goes away.
struct OwnedTensor {
  std::shared_ptr<void> storage;
  TensorView view;
};

// Per-operation settings. Add a field here rather than a parameter to a function.
struct Options {
  // Matching key across ranks. Empty: the engine names it "noname.<n>" with a per-process
  // counter, which matches only if every rank issues the same sequence of operations.
  std::string name;
  ReduceOp op = ReduceOp::kSum;  // allreduce, reducescatter
  double prescale = 1.0;         // applied to the input before reducing
  double postscale = 1.0;        // applied to the result after reducing
  int root = 0;                  // broadcast: a *global* rank, member of the process set
  int processSet = 0;            // 0 = all ranks
  std::vector<int32_t> splits;   // alltoall: rows for each set rank; empty = equal split
  // The name will not be used again (generated for an unnamed call): the operation is negotiated
  // in full and never kept in the response cache, where it would only push out the names that
  // do recur. Implied by an empty `name`; bindings that generate names themselves (Python's
  // "<op>.noname.<handle>") set it.
  bool oneOffName = false;
};

// The outcome of an asynchronous collective, shared between the caller and the engine.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool isCompleted() const = 0;
  // Blocks until completion; rethrows the operation's failure (an hvd::Error subclass).
  virtual void wait() = 0;
  // Like wait() but gives up after `timeout` (milliseconds convert implicitly); returns whether
  // the operation completed.
  virtual bool waitFor(std::chrono::microseconds timeout) = 0;
  // Outputs the engine allocated (allgather, alltoall; one per group member). Valid after wait().
  virtual const std::vector<OwnedTensor>& outputs() const = 0;
  // Alltoall: rows received from each set rank. Valid after wait().
  virtual const std::vector<int32_t>& receivedSplits() const = 0;
  // Join: the global rank that joined last. Valid after wait().
  virtual int joinResult() const = 0;
  // Runs `callback` once when the operation completes, successfully or not (call wait() inside
  // it to get the outputs or the failure): on the thread that completes it, or at once on this
  // thread if it already has. At most one callback per operation. The engine drives an
  // operation that has a callback without waiting for a caller to do it (nobody else will), so
  // a caller can enqueue, register and return. The callback runs on the engine's thread: it
  // must be short and must not wait for other Horovod operations; hand longer work to a thread
  // of your own.
  virtual void whenComplete(std::function<void()> callback) = 0;
};
using WorkPtr = std::shared_ptr<Work>;

}  // namespace hvd
