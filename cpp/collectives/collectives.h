// Collective algorithms over a Communicator. Written once against the transport; each picks an
// algorithm by message size and world shape (see algorithms table in collectives/algorithms.cc).
//
// Contract for every function: all members of the communicator call it with matching
// arguments, in the same order relative to other collectives. Results are bitwise identical on
// every rank and every run (reduction order is fixed by rank and chunk, never by arrival).
// Every blocking step waits at most the communicator's timeout (Communicator::deadline()).
// Failures throw (PeerLost, Timeout, Aborted). Buffers are host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "horovod/types.h"

namespace hvd::collectives {

// In place: buf = postscale * (OP over ranks of buf). op is kSum, kMin, kMax or kProduct (Average
// is the engine's business: Sum with postscale 1/n). The result is bitwise what scaleBuffer()
// would make of the unscaled one; the shared-memory algorithms scale while the results are in
// cache instead of in a second pass. A dtype scaleBuffer() refuses with postscale != 1 throws
// before anything is sent.
void allreduce(Communicator& comm, void* buf, size_t count, DataType dtype, ReduceOp op, double postscale = 1.0);
// Out of place: out = postscale * (OP over ranks of in); `in` is not modified. in == out is the
// in-place form; other overlap is not allowed. Cheaper than copying in to out first: the
// shared-memory algorithms read `in` directly.
void allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
               double postscale = 1.0);

// Per-call settings of the allreduce below.
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;  // as above (no Average)
  double prescale = 1.0;         // every input element is multiplied by this first
  double postscale = 1.0;
  // The members agreed beforehand (the engine's negotiation) that every member's `out` lies in
  // a shared buffer (transport/peer_memory.h): the "shm_inplace" algorithm reduces straight
  // inside those buffers, without staging copies. It checks that it can (one barrier, more when
  // buffers are new) and falls back to the other algorithms on every member alike if not. Must
  // be equal on all members.
  bool sharedOutputs = false;
  // When set, receives the name of the routine that ran: an allreduce table entry's name
  // ("shm_inplace" when it ran over the members' shared outputs), or kLocalAllreduce (a set of
  // one, or no elements). A static string. Costs nothing: the choice is made anyway.
  const char** ran = nullptr;
};
// What ran when there was nothing to exchange (a set of one, or no elements).
inline constexpr const char kLocalAllreduce[] = "local";
// out = postscale * (OP over ranks of prescale * in), `in` unmodified (in == out: in place).
// Returns true when it ran over the members' shared outputs (see sharedOutputs).
bool allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype,
               const AllreduceOptions& options);

// HOROVOD_SHARED_INPLACE: whether callers may ask for the algorithms over shared outputs (the
// shared in-place allreduce, the shared-output allgather) at all. Read once per process.
bool sharedOutputsEnabled();
// Whether the members `setRanks` (global ranks) can run the algorithms over shared outputs:
// enabled, more than one member, all on this rank's host (`hostOf`: per global rank; empty = one
// host) and a transport that maps peers' buffers (Transport::peerMemory). No communication.
bool sharedOutputsPossible(Transport& transport, const std::vector<std::string>& hostOf,
                           const std::vector<int>& setRanks);

// One tensor of a fused allreduce: `count` elements read from `in`, results written to `out`
// (in == out is in place; no other overlap, within or across pieces).
struct Piece {
  const void* in;
  void* out;
  size_t count;
};
// The allreduce of the pieces' concatenation, each piece's result into its own output, when the
// algorithm chosen for the total size reads and writes pieces where they lie (the shared-memory
// ones); false, with nothing done or sent, when it needs one contiguous buffer: the caller then
// copies the pieces into one and calls allreduce(). Every member makes the same choice (it
// depends on the total size and placement only), whichever form its own data takes.
// Returns the name of the routine that ran (as AllreduceOptions::ran), or nullptr when it declined.
const char* allreducePieces(Communicator& comm, const std::vector<Piece>& pieces, DataType dtype, ReduceOp op,
                            double postscale = 1.0);

struct AllgatherOptions {
  // Outputs may be shared buffers (transport/peer_memory.h) on the members: the "shm_outputs"
  // algorithm then writes every block straight into every member's output. It checks that every
  // member's output is one (one barrier) and falls back on every member alike if not. Must be
  // equal on all members; whether this member's output really is shared need not be.
  bool sharedOutputs = false;
};
// out = concatenation of every rank's `in` in set-rank order; bytesPerRank[r] is rank r's size.
// `in` may point into `out` at this rank's offset (in-place allgather). Returns true when it ran
// over the members' shared outputs.
bool allgatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytesPerRank,
                const AllgatherOptions& options = {});
// Whether allgatherv with sharedOutputs would try the members' shared outputs for an output of
// `totalBytes` here (so the caller should allocate a shared one). Equal on all members;
// collective the first time (it may create the SharedSpace), like allgatherv.
bool allgatherTriesSharedOutputs(Communicator& comm, size_t totalBytes);

// buf on every rank = buf on `root` (a set rank).
void broadcast(Communicator& comm, void* buf, size_t bytes, int root);

// Rank r sends sendBytes[p] bytes (consecutive blocks of `in`, in set-rank order) to each rank p
// and receives recvBytes[p] bytes from p into consecutive blocks of `out`.
void alltoallv(Communicator& comm, const void* in, const std::vector<size_t>& sendBytes, void* out,
               const std::vector<size_t>& recvBytes);

// Reduces `in` (sum of countsPerRank elements on every rank) and leaves block r (countsPerRank[r]
// elements, blocks consecutive in set-rank order) of the result in `out` on rank r.
void reducescatter(Communicator& comm, const void* in, void* out, const std::vector<size_t>& countsPerRank,
                   DataType dtype, ReduceOp op);

void barrier(Communicator& comm);

}  // namespace hvd::collectives
