// Shared-memory allreduce (all members on one host). Every member owns a SharedSpace buffer
// used as two halves; each chunk of the message goes through the next half (see
// partition.h: sharedHalf). Reduction order is rank order 0..n-1 for every element.
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/partition.h"
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
  const auto* in = static_cast<const uint8_t*>(args.in);
  auto* buf = static_cast<uint8_t*>(args.buf);
  for (size_t offset = 0; offset < args.count; offset += chunkElems) {
    const size_t c = std::min(chunkElems, args.count - offset);
    const uint64_t phase = comm.nextSharedPhase();
    uint8_t* out = buf + offset * elem;
    std::memcpy(sharedHalf(space, me, phase), in + offset * elem, c * elem);
    space.barrier(comm.deadline());
    args.kernel.to(out, sharedHalf(space, 0, phase), sharedHalf(space, 1, phase), c);
    for (int j = 2; j < n; ++j) args.kernel.into(out, sharedHalf(space, j, phase), c);
  }
}

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
  // Slices are whole cache lines so ranks never write the same line.
  const size_t lineElems = 64 / elem;
  const size_t tileElems = kTileBytes / elem;
  alignas(64) uint8_t tile[kTileBytes];
  const auto* in = static_cast<const uint8_t*>(args.in);
  auto* buf = static_cast<uint8_t*>(args.buf);

  struct Chunk {
    size_t offset = 0, count = 0, sliceElems = 0;
    uint64_t phase = 0;
    Block slice(int j) const {
      size_t begin = std::min(count, sliceElems * j);
      return Block{begin, std::min(count, begin + sliceElems) - begin};
    }
  };
  // One slice geometry for every chunk of the call (the last chunk is clipped), so a rank's
  // result region never moves into another rank's input region between chunks. Chunks are made
  // about equal so the last one does not leave most ranks idle.
  const size_t chunks = (args.count + chunkElems - 1) / chunkElems;
  const size_t perChunk = (args.count + chunks - 1) / chunks;
  size_t sliceElems = ((perChunk + n - 1) / n + lineElems - 1) / lineElems * lineElems;
  if (sliceElems * n > chunkElems) sliceElems = chunkElems / n / lineElems * lineElems;
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
  auto toOutput = [&](void* dst, const void* src, size_t bytes) {
    if (stream) {
      streamCopy(dst, src, bytes, /*fence=*/false);
    } else {
      std::memcpy(dst, src, bytes);
    }
  };
  auto copyOut = [&](const Chunk& c) {
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      Block b = c.slice(j);
      toOutput(buf + (c.offset + b.begin) * elem, sharedHalf(space, j, c.phase) + b.begin * elem, b.size * elem);
    }
  };

  Chunk previous;
  bool havePrevious = false;
  for (size_t offset = 0; offset < args.count; offset += step) {
    const Chunk c = makeChunk(offset);
    const uint8_t* source = in + c.offset * elem;
    uint8_t* mine = sharedHalf(space, me, c.phase);
    const Block own = c.slice(me);
    std::memcpy(mine, source, own.begin * elem);
    std::memcpy(mine + (own.begin + own.size) * elem, source + (own.begin + own.size) * elem,
                (c.count - own.begin - own.size) * elem);
    space.barrier(comm.deadline());
    if (havePrevious) copyOut(previous);

    for (size_t t = own.begin; t < own.begin + own.size; t += tileElems) {
      const size_t len = std::min(tileElems, own.begin + own.size - t);
      auto input = [&](int j) -> const uint8_t* {
        return j == me ? source + t * elem : sharedHalf(space, j, c.phase) + t * elem;
      };
      args.kernel.to(tile, input(0), input(1), len);
      for (int j = 2; j < n; ++j) args.kernel.into(tile, input(j), len);
      toOutput(buf + (c.offset + t) * elem, tile, len * elem);
      std::memcpy(mine + t * elem, tile, len * elem);
    }
    previous = c;
    havePrevious = true;
  }
  space.barrier(comm.deadline());
  copyOut(previous);
  if (stream) streamFence();
}

}  // namespace hvd::collectives
