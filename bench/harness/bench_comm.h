// BenchComm: the few verbs the benchmark harness needs from a communication system. One
// implementation per system under test (Horovod's public API in hvd_bench.cc, MPI in
// peers/mpi_bench.cc), so that every system is timed by the same loop, the same data and the
// same statistics.
//
// All calls are collective: every rank calls them in the same order. Called from the main
// thread only. Buffers are owned by the harness and outlive the call; outputs the system
// allocates itself (Horovod's allgather/alltoall) stay valid until the next call of the same
// method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/data.h"

namespace hvd::bench {

class BenchComm {
 public:
  virtual ~BenchComm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A short name for the report header ("horovod", "openmpi", ...).
  virtual std::string systemName() const = 0;
  // Whether the system can carry this element type.
  virtual bool supports(ElemType type) const = 0;

  // out[i] = SUM_ranks in[i]; in != out.
  virtual void allreduce(const void* in, void* out, size_t count, ElemType type) = 0;
  // Every rank contributes `countPerRank` elements; returns the concatenation in rank order
  // (size() * countPerRank elements). `scratch` has room for it; a system may return its own.
  virtual const void* allgather(const void* in, size_t countPerRank, ElemType type, void* scratch) = 0;
  // Overwrites `buffer` on every rank but `root` with root's contents.
  virtual void broadcast(void* buffer, size_t count, ElemType type, int root) = 0;
  // `in` holds size() blocks of `countPerRank` elements, block j for rank j; returns the
  // received blocks in source-rank order (in `scratch` or the system's own buffer).
  virtual const void* alltoall(const void* in, size_t countPerRank, ElemType type, void* scratch) = 0;
  // Sum of `in` (size() * countPerRank elements) over ranks; this rank keeps block rank().
  virtual void reducescatter(const void* in, void* out, size_t countPerRank, ElemType type) = 0;
  // `k` independent allreduces (in[j] -> out[j], `count` elements each) issued
  // asynchronously, then waited on together.
  virtual void allreduceBatch(const std::vector<const void*>& in, const std::vector<void*>& out, size_t count,
                              ElemType type) = 0;

  // allreduce_shared rows: `bytes` of memory the system can reduce in place without staging
  // copies (Horovod: hvd::allocateShared), or nullptr when it has no such memory (the harness
  // then uses its own). The memory lives while a copy of the pointer does.
  virtual std::shared_ptr<void> allocateShared(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // buf = average over ranks of buf, in place (allreduce_shared rows).
  virtual void allreduceAverageInPlace(void* buf, size_t count, ElemType type) {
    (void)buf, (void)count, (void)type;
    throw std::runtime_error(systemName() + " does not implement allreduce_shared");
  }

  // out = average over ranks of in, `out` from allocateShared (allreduce_into_shared rows).
  virtual void allreduceAverageInto(const void* in, void* out, size_t count, ElemType type) {
    (void)in, (void)out, (void)count, (void)type;
    throw std::runtime_error(systemName() + " does not implement allreduce_into_shared");
  }

  // For the memory report: bytes of the system's persistent staging buffer that the run has
  // grown to use (Horovod: the fusion buffer); 0 when the system has none or does not tell.
  virtual size_t fusionBufferBytes() { return 0; }
  // Drops the outputs the system allocated that this object still holds (allgather/alltoall
  // results), so that memory measured afterwards is the system's own, not the caller's data.
  virtual void releaseOutputs() {}

  virtual void barrier() = 0;
  // Element-wise maximum over ranks of a float64 vector, in place (for timing statistics; never
  // timed itself).
  virtual void maxOverRanks(std::vector<double>& values) = 0;
};

}  // namespace hvd::bench
