// Shared-memory allreduce (all members on one host). Every member owns a SharedSpace buffer
// used as two halves; each chunk of the message goes through the next half (see
// partition.h: sharedHalf). Reduction order is rank order 0..n-1 for every element.
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/partition.h"
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

// Per chunk: publish what the others need (everything but my slice), barrier, reduce my slice
// over all members in rank order (my own part read from my private buffer) and publish the
// result, barrier, copy every other slice's result.
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

  for (size_t offset = 0; offset < args.count; offset += chunkElems) {
    const size_t c = std::min(chunkElems, args.count - offset);
    const size_t sliceElems = ((c + n - 1) / n + lineElems - 1) / lineElems * lineElems;
    auto slice = [&](int j) {
      size_t begin = std::min(c, sliceElems * j);
      return Block{begin, std::min(c, begin + sliceElems) - begin};
    };
    const uint64_t phase = comm.nextSharedPhase();
    const uint8_t* source = in + offset * elem;
    uint8_t* chunk = buf + offset * elem;
    uint8_t* mine = sharedHalf(space, me, phase);
    const Block own = slice(me);
    std::memcpy(mine, source, own.begin * elem);
    std::memcpy(mine + (own.begin + own.size) * elem, source + (own.begin + own.size) * elem,
                (c - own.begin - own.size) * elem);
    space.barrier(comm.deadline());

    for (size_t t = own.begin; t < own.begin + own.size; t += tileElems) {
      const size_t len = std::min(tileElems, own.begin + own.size - t);
      auto input = [&](int j) -> const uint8_t* {
        return j == me ? source + t * elem : sharedHalf(space, j, phase) + t * elem;
      };
      args.kernel.to(tile, input(0), input(1), len);
      for (int j = 2; j < n; ++j) args.kernel.into(tile, input(j), len);
      std::memcpy(chunk + t * elem, tile, len * elem);
      std::memcpy(mine + t * elem, tile, len * elem);
    }
    space.barrier(comm.deadline());

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      Block b = slice(j);
      std::memcpy(chunk + b.begin * elem, sharedHalf(space, j, phase) + b.begin * elem, b.size * elem);
    }
  }
}

}  // namespace hvd::collectives
