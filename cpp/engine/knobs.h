// Knobs: the engine settings that may change while a job runs (autotuning). The Tuner that
// decides them on rank 0 plugs in through engine/tuner.h.
//
// Every rank must run every response list with the same values (fusion decides which tensors
// share a collective; the crossover and hierarchical switches decide which algorithm every
// member runs). So a change travels like everything else the ranks agree on: rank 0's
// Coordinator puts it into the next ResponseList (ResponseList::knobs), and every rank, rank 0
// included, applies it when it starts processing that list, before any of its responses. Lists
// are processed in the same order everywhere, so no two ranks ever run one list with different
// knobs.
//
// Which knobs a job may tune: the spin/park settings only change how this rank waits, the others
// change what the collectives do; all are safe to change between two lists.
#pragma once

#include <cstdint>

namespace hvd::engine {

struct Knobs {
  int64_t fusionThreshold = 0;          // HOROVOD_FUSION_THRESHOLD (bytes; 0 = no fusion)
  int64_t burstQuietUs = 0;             // HOROVOD_BURST_QUIET_US (request batching window)
  // HOROVOD_CALLER_PROGRESS_US (the background thread's park). Never switched between 0 and
  // non-zero at run time (whether callers may drive is fixed when an operation is enqueued): a
  // Runtime started with 0 keeps 0, one started with more keeps at least 1.
  int64_t callerProgressUs = 0;
  int64_t callerSpinUs = 0;             // HOROVOD_CALLER_SPIN_US (a driving caller's poll)
  int64_t allreduceCrossoverBytes = 0;  // size limit of the latency-bound allreduce rows; 0 = table's
  bool cacheEnabled = true;             // response cache (HOROVOD_CACHE_CAPACITY > 0)
  bool hierarchical = true;             // hierarchical allreduce/allgather may be chosen

  bool operator==(const Knobs&) const = default;
};

}  // namespace hvd::engine
