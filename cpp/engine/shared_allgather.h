// Shared-output allgather: the one-copy path for an allgather whose outputs are shared buffers
// on every member (the executor allocates them from the OutputPool's shared blocks when the
// members share a host), all members on one host.
//
// Protocol (every member, same point of the collective order):
//  1-2. map every member's output (engine/member_buffers.h); if any member cannot (its output
//     is not a shared buffer, a mapping failed), every member returns false before writing
//     anything, and the caller runs the staged allgather;
//  3. each member copies its own block from its input straight into EVERY member's output, in
//     chunks that stay in cache across the n destinations (streaming stores when the output is
//     large); barrier.
// Each input byte is read from memory once and each output byte written once, where the staged
// path copies every block through the SharedSpace first (twice the copies).
//
// Called by the thread that runs the engine (runtime.h), one operation per communicator at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"

namespace hvd::engine {

// Whether an allgather of `totalBytes` over `comm` tries sharedOutputAllgather: several members
// sharing a usable SharedSpace, and an output large enough for a pooled block. Depends only on
// what every member sees alike, so all members agree (collective: may create the SharedSpace).
// Per-rank settings (HOROVOD_SHARED_INPLACE, the pool budget) only decide whether this rank's
// output is shared; a member without one makes every member fall back.
bool sharedAllgatherWanted(Communicator& comm, size_t totalBytes);

// Gathers the members' blocks (bytesPerRank[j] bytes of member j, at the offsets of rank order)
// into `out` (this member's output, totalBytes) from `in` (this member's block). Returns false
// on every member alike when the path cannot run here (see above). Throws PeerLost/Timeout/
// Aborted like the collectives.
bool sharedOutputAllgather(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytesPerRank);

// Allgathers that ran the shared-output path in this process (tests, benchmarks).
uint64_t sharedAllgatherCount();

}  // namespace hvd::engine
