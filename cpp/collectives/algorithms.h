// Algorithm table for allreduce (internal to collectives/). Choice is data: each entry has a
// name, a one-line description and a size rule; allreduce() takes the first entry whose rule
// matches, unless HOROVOD_ALLREDUCE_ALGO (or Communicator::setAllreduceAlgorithm) names one.
// Every member must make the same choice, so rules look only at values equal on all members
// (message size, set size, whether the set shares memory, the members' placement on hosts).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/reduce_kernels.h"
#include "common/params.h"
#include "horovod/types.h"

namespace hvd::collectives {

const Param<std::string>& allreduceAlgorithmParam();
// "" is fine; any other name must be in the table (InvalidArgument listing them otherwise).
void checkAllreduceAlgorithmName(std::string_view name);

class MessageIo;

struct AllreduceArgs {
  Communicator& comm;
  const void* in;  // input; equal to buf for in place. Point-to-point algorithms get in == buf
                   // (shared-memory and hierarchical ones read `in` directly).
  void* buf;       // output
  size_t count;
  DataType dtype;
  const ReduceKernel& kernel;
  SharedSpace* shared;  // non-null only when the algorithm needs it and the members share memory
  // Algorithms with takesPieces read and write through this (collectives/pieces.h) when set; in
  // and buf are then null.
  const MessageIo* io = nullptr;
  // Every result element is multiplied by this (scaleBuffer's arithmetic) before it is written,
  // by algorithms with foldsPostscale; the dispatcher scales the others' results afterwards.
  double postscale = 1.0;
};
// Deadlines: every blocking step takes comm.deadline() when it starts, so a large collective is
// bounded per step (progress), not as a whole.

struct AllreduceAlgorithm {
  const char* name;
  const char* description;
  bool needsShared;  // runs only over a SharedSpace
  // Default rule: chosen when the message is at most maxBytes, or, with perPeer, when
  // bytes * (n - 1) is (for algorithms whose cost grows with the number of peers).
  size_t maxBytes;
  bool perPeer;
  void (*run)(const AllreduceArgs& args);
  // Runs only over several hosts with equally many members each and a usable shared space on
  // every host (hierarchicalUsable in collectives/hierarchical.h).
  bool needsHosts = false;
  // Reads and writes through AllreduceArgs::io: runs a fused allreduce without a fusion buffer.
  bool takesPieces = false;
  // Honours AllreduceArgs::postscale while the results are in cache (saves a pass over the
  // output for Average).
  bool foldsPostscale = false;
};

// In table (preference) order.
const std::vector<AllreduceAlgorithm>& allreduceAlgorithms();
// The algorithm allreduce() would run on `n` ranks; `shared` = a usable SharedSpace exists,
// `hosts` = the hierarchical algorithm can run.
const AllreduceAlgorithm& chooseAllreduce(std::string_view requested, size_t bytes, int n, bool shared,
                                          bool hosts = false);
// The algorithm allreduce() runs for `bytes` on this communicator. Collective the first time it
// looks at shared memory (like allreduce itself): every member calls it at the same point.
const AllreduceAlgorithm& allreduceChoice(Communicator& comm, size_t bytes);

void allreduceRecursiveDoubling(const AllreduceArgs& args);
void allreduceRing(const AllreduceArgs& args);
void allreduceSharedDirect(const AllreduceArgs& args);
void allreduceSharedSlices(const AllreduceArgs& args);
void allreduceHierarchical(const AllreduceArgs& args);

}  // namespace hvd::collectives
