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
bool allreducePieces(Communicator& comm, const std::vector<Piece>& pieces, DataType dtype, ReduceOp op,
                     double postscale = 1.0);

// out = concatenation of every rank's `in` in set-rank order; bytesPerRank[r] is rank r's size.
// `in` may point into `out` at this rank's offset (in-place allgather).
void allgatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytesPerRank);

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
