// Shared in-place allreduce: the zero-copy path for allreduces whose output lies inside a shared
// buffer (engine/shared_buffers.h) on every member, all members on one host. The reduction runs
// in place across the members' outputs; a member's input is either its output itself or any
// other tensor (e.g. a fresh gradient), staged into the output's other members' slices first.
//
// Protocol (every member, same point of the collective order; the executor calls it for a
// response the coordinator flagged sharedInPlace):
//  0. an input other than the output: copy every slice but mine (step 3) into the output;
//  1-2. map every member's buffer (engine/member_buffers.h: publish a descriptor in the set's
//     SharedSpace, map the peers' segments, agree; two barriers, one in the steady state); if
//     any member cannot, every member returns false and the caller runs the staged path
//     (nothing has been written but step 0's copy into the own output, which that path rewrites);
//  3. member i reduces slice i over all members' buffers in rank order 0..n-1 (its own part read
//     from its input), in L1-sized tiles (prescale applied per input, postscale and Average to
//     the result), and writes the result into slice i of EVERY member's buffer; barrier.
// The result is bitwise identical on every member (each element is computed by one rank). No
// allocation per call (mappings are cached). Every wait is a SharedSpace barrier with the
// communicator's deadline, which watches the peers: a dead peer gives PeerLost, never a hang.
//
// Called by the thread that runs the engine (runtime.h), one operation per communicator at a time.
#pragma once

#include <vector>

#include "collectives/communicator.h"
#include "engine/message.h"
#include "engine/tensor_queue.h"

namespace hvd::engine {

// Runs the single-tensor allreduce `r` into entries[0]->output. Returns false (on every
// member alike, having written nothing but step 0's copy into its own output) when it cannot
// run here: no usable SharedSpace, a set of one, or some member could not map a peer's buffer;
// the caller then takes the staged path. Throws PeerLost/Timeout/Aborted like the collectives.
bool sharedInPlaceAllreduce(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);

// Operations that ran the shared in-place path in this process (tests, benchmarks).
uint64_t sharedInPlaceCount();

}  // namespace hvd::engine
