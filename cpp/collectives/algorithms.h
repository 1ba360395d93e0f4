// Algorithm table for allreduce (internal to collectives/). Choice is data: each entry has a
// name, a one-line description and a size rule; allreduce() takes the first entry whose rule
// matches, unless HOROVOD_ALLREDUCE_ALGO (or Communicator::setAllreduceAlgorithm) names one.
// Every member must make the same choice, so rules look only at values equal on all members
// (message size, set size, whether the set shares memory, the members' placement on hosts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/reduce_kernels.h"
#include "common/params.h"
#include "horovod/types.h"

namespace hvd::collectives {

const Param<std::string>& allreduceAlgorithmParam();
// HOROVOD_ALLREDUCE_CROSSOVER_BYTES (read by the engine's Config; applied through
// Communicator::setAllreduceCrossover).
const Param<int64_t>& allreduceCrossoverParam();
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
  // Every input element is multiplied by this before it is reduced, by algorithms with an
  // `attempt` (they read the inputs where they lie); the others get prescaled inputs (1.0 here).
  double prescale = 1.0;
};
// Deadlines: every blocking step takes comm.deadline() when it starts, so a large collective is
// bounded per step (progress), not as a whole.

inline constexpr size_t kAnyBytes = std::numeric_limits<size_t>::max();

// One row of the table; rows name their fields (designated initializers), the defaults being
// "no requirement".
struct AllreduceAlgorithm {
  const char* name = "";
  const char* description = "";
  bool needsShared = false;  // runs only over a SharedSpace
  // Runs only over several hosts with equally many members each and a usable shared space on
  // every host (hierarchicalUsable in collectives/hierarchical.h).
  bool needsHosts = false;
  // Runs only when the caller asked for the members' shared outputs (AllreduceOptions::
  // sharedOutputs, agreed by all members beforehand); then it goes first, before a requested
  // name too: the agreement is per operation, the request per job.
  bool needsSharedOutputs = false;
  // Default rule: chosen when the message is at most maxBytes, or, with perPeer, when
  // bytes * (n - 1) is (for algorithms whose cost grows with the number of peers).
  size_t maxBytes = kAnyBytes;
  bool perPeer = false;
  // Reads and writes through AllreduceArgs::io: runs a fused allreduce without a fusion buffer.
  bool takesPieces = false;
  // Honours AllreduceArgs::postscale while the results are in cache (saves a pass over the
  // output for Average).
  bool foldsPostscale = false;
  void (*run)(const AllreduceArgs& args) = nullptr;
  // Instead of run, for an algorithm that learns only while running whether it can (the
  // members' buffers may not all be mappable): false, on every member alike, when it cannot,
  // having written nothing the next choice does not rewrite; the dispatcher then runs the next
  // choice. Honours AllreduceArgs::prescale and postscale.
  bool (*attempt)(const AllreduceArgs& args) = nullptr;
};

// In table (preference) order.
const std::vector<AllreduceAlgorithm>& allreduceAlgorithms();
// The algorithm allreduce() would run on `n` ranks; `shared` = a usable SharedSpace exists,
// `hosts` = the hierarchical algorithm can run, `sharedOutputs` = the members' outputs are
// shared buffers they can map (AllreduceOptions::sharedOutputs and sharedOutputsUsable).
// `crossover`: when not 0, replaces maxBytes of every row that has a size rule
// (Communicator::allreduceCrossover, tuned at run time).
const AllreduceAlgorithm& chooseAllreduce(std::string_view requested, size_t bytes, int n, bool shared,
                                          bool hosts = false, bool sharedOutputs = false, size_t crossover = 0);
// The size rule the table applies by default: the largest finite maxBytes of its rows (what
// a crossover of 0 means).
size_t defaultAllreduceCrossover();
// The algorithm allreduce() runs for `bytes` on this communicator. Collective the first time it
// looks at shared memory (like allreduce itself): every member calls it at the same point.
const AllreduceAlgorithm& allreduceChoice(Communicator& comm, size_t bytes);

void allreduceRecursiveDoubling(const AllreduceArgs& args);
void allreduceRing(const AllreduceArgs& args);
void allreduceSharedDirect(const AllreduceArgs& args);
void allreduceSharedSlices(const AllreduceArgs& args);
void allreduceHierarchical(const AllreduceArgs& args);
bool allreduceSharedInPlace(const AllreduceArgs& args);

// ---- Allgather ---------------------------------------------------------------------------------

struct AllgatherArgs {
  Communicator& comm;
  const uint8_t* in;                   // this member's block (algorithms with readsInput)
  uint8_t* out;                        // every member's block j at offsets[j]
  const std::vector<size_t>& bytes;    // of each member's block
  const std::vector<size_t>& offsets;  // of each member's block in out
  size_t total;                        // bytes of out
  SharedSpace* shared;                 // non-null only when usable and the algorithm needs it
};

// Chosen like the allreduce rows: the first row that can run, in table order. Every rule looks
// only at values equal on all members.
struct AllgatherAlgorithm {
  const char* name = "";
  const char* description = "";
  bool needsShared = false;         // runs only over a SharedSpace
  bool needsHosts = false;          // as AllreduceAlgorithm::needsHosts
  // Runs only when the caller offers shared outputs (AllgatherOptions::sharedOutputs) and the
  // transport can map them (sharedOutputsUsable).
  bool needsSharedOutputs = false;
  size_t minBytes = 0;              // chosen for outputs of at least this many bytes
  // Reads its own block from `in` (which may lie at its offset in out); the others find it
  // copied into out first and work in place.
  bool readsInput = false;
  void (*run)(const AllgatherArgs& args) = nullptr;
  bool (*attempt)(const AllgatherArgs& args) = nullptr;  // as AllreduceAlgorithm::attempt
};

const std::vector<AllgatherAlgorithm>& allgatherAlgorithms();
// The row allgatherv() runs for `total` output bytes on this communicator, with `shared` set to
// the SharedSpace when the row needs it. `sharedOutputs`: the caller offers shared outputs.
// Collective the first time it looks at shared memory or the hosts (like allgatherv itself).
const AllgatherAlgorithm& allgatherChoice(Communicator& comm, size_t total, bool sharedOutputs, SharedSpace** shared);

void allgatherShared(const AllgatherArgs& args);
bool allgatherSharedOutputs(const AllgatherArgs& args);

}  // namespace hvd::collectives
