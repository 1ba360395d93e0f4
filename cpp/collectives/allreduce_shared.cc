// Shared-memory allreduce (all members on one host). Every member owns a SharedSpace buffer
// used as two halves; each chunk of the message goes through the next half (see
// partition.h: sharedHalf). Reduction order is rank order 0..n-1 for every element.
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/partition.h"
#include "collectives/pieces.h"
#include "collectives/reduce.h"
#include "collectives/stream_copy.h"
#include "common/check.h"

namespace hvd::collectives {
namespace {

// Elements are reduced in tiles that stay in L1 while n inputs are folded into them.
constexpr size_t kTileBytes = 16 << 10;
// Larger chunks mean fewer barriers; smaller ones keep the shared data cache-resident.
constexpr size_t kSliceChunkBytes = size_t(1) << 20;

SharedSpace& checkedSpace(const AllreduceArgs& args) {
  HVD_CHECK(args.shared != nullptr) << "shared-memory allreduce without a SharedSpace";
  HVD_CHECK_EQ(args.shared->memberIndex(), args.comm.rank()) << "shared space members differ from the set";
  return *args.shared;
}

}  // namespace

// One barrier per chunk: each rank publishes its chunk, then every rank reduces all n published
// chunks (in rank order) into its own buffer. Redundant arithmetic, minimal latency.
void allreduceSharedDirect(const AllreduceArgs& args) {
  Communicator& comm = args.comm;
  SharedSpace& space = checkedSpace(args);
  const int n = comm.size(), me = comm.rank();
  const size_t elem = args.kernel.elementSize;
  const size_t chunkElems = sharedHalfBytes(space) / elem;
  const MessageIo contiguous(args.in, args.buf, elem);
  const MessageIo& io = args.io != nullptr ? *args.io : contiguous;
  for (size_t offset = 0; offset < args.count; offset += chunkElems) {
    const size_t c = std::min(chunkElems, args.count - offset);
    const uint64_t phase = comm.nextSharedPhase();
    io.read(offset, c, sharedHalf(space, me, phase));
    space.barrier(comm.deadline());
    // Straight into the output, one contiguous run of it (a piece) at a time.
    for (size_t done = 0; done < c;) {
      size_t run = c - done;
      uint8_t* out = io.outputRun(offset + done, run);
      const size_t at = done * elem;
      args.kernel.to(out, sharedHalf(space, 0, phase) + at, sharedHalf(space, 1, phase) + at, run);
      for (int j = 2; j < n; ++j) args.kernel.into(out, sharedHalf(space, j, phase) + at, run);
      scaleBuffer(out, run, args.dtype, args.postscale);  // the run is still in cache
      done += run;
    }
  }
}

namespace {

// Chunk c's slice of this rank, reduced over every member in rank order (this rank's part read
// from its private input through `io`): the result goes where the peers copy it from (`mine`,
// this rank's half) and into this rank's output in the same pass; the last fold writes both from
// registers (ReduceKernel::toAndCopy).
void reduceOwnSlice(const AllreduceArgs& args, SharedSpace& space, const MessageIo& io, const Chunk& c, uint8_t* mine,
                    bool stream) {
  const int n = args.comm.size(), me = args.comm.rank();
  const size_t elem = args.kernel.elementSize;
  const size_t tileElems = kTileBytes / elem;
  const Block own = c.slice(me);
  const size_t ownEnd = own.begin + own.size;
  for (size_t t = own.begin, len = 0; t < ownEnd; t += len) {
    len = std::min(tileElems, ownEnd - t);
    const uint8_t* myInput = io.inputRun(c.offset + t, len);  // cut at the end of a piece
    uint8_t* myOutput = io.outputRun(c.offset + t, len);      // pieces end at the same element
    auto input = [&](int j) -> const uint8_t* { return j == me ? myInput : sharedHalf(space, j, c.phase) + t * elem; };
    uint8_t* result = mine + t * elem;
    const uint8_t* left = input(0);
    for (int j = 1; j < n - 1; ++j, left = result) args.kernel.to(result, left, input(j), len);
    args.kernel.toAndCopy(result, myOutput, left, input(n - 1), len, args.postscale, stream);
  }
}

}  // namespace

// Reduce-scatter + gather through the shared buffers, software-pipelined so that each chunk
// costs one barrier: iteration k publishes what the others need of chunk k (everything but my
// slice), barrier, copies the other slices' results of chunk k-1, then reduces my slice of chunk
// k over all members in rank order (my own part read from my private input) and publishes the
// result in my slice; a last barrier precedes the last copy. Chunks alternate buffer halves.
// Why it is safe: my publish of chunk k+2 (same half as k) writes only input regions, which
// every peer finished reading (reduce k) before the barrier of k+1 that I have passed; my
// result of chunk k+2 is written after the barrier of k+2, which every peer reaches only after
// copying the results of chunk k. The final barrier leaves the halves free for any collective.
void allreduceSharedSlices(const AllreduceArgs& args) {
  Communicator& comm = args.comm;
  SharedSpace& space = checkedSpace(args);
  const int n = comm.size(), me = comm.rank();
  const size_t elem = args.kernel.elementSize;
  const size_t chunkElems = std::min(sharedHalfBytes(space), kSliceChunkBytes) / elem;
  const MessageIo contiguous(args.in, args.buf, elem);
  const MessageIo& io = args.io != nullptr ? *args.io : contiguous;
  const size_t sliceElems = sliceElemsFor(args.count, chunkElems, n, elem);
  const size_t step = sliceElems * n;
  auto makeChunk = [&](size_t offset) {
    Chunk c;
    c.offset = offset;
    c.count = std::min(step, args.count - offset);
    c.sliceElems = sliceElems;
    c.phase = comm.nextSharedPhase();
    return c;
  };
  // Large outputs are written with streaming stores (collectives/stream_copy.h).
  const bool stream = args.count * elem >= kStreamOutputBytes;
  auto copyOut = [&](const Chunk& c) {
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      Block b = c.slice(j);
      io.write(c.offset + b.begin, sharedHalf(space, j, c.phase) + b.begin * elem, b.size, stream);
    }
  };

  Chunk previous;
  bool havePrevious = false;
  for (size_t offset = 0; offset < args.count; offset += step) {
    const Chunk c = makeChunk(offset);
    uint8_t* mine = sharedHalf(space, me, c.phase);
    const Block own = c.slice(me);
    const size_t ownEnd = own.begin + own.size;
    io.read(c.offset, own.begin, mine);
    io.read(c.offset + ownEnd, c.count - ownEnd, mine + ownEnd * elem);
    space.barrier(comm.deadline());
    if (havePrevious) copyOut(previous);
    reduceOwnSlice(args, space, io, c, mine, stream);
    previous = c;
    havePrevious = true;
  }
  space.barrier(comm.deadline());
  copyOut(previous);
  if (stream) streamFence();
}

}  // namespace hvd::collectives
