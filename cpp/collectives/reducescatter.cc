// reducescatter: shared-memory rounds when the members share memory, else a ring. Both process
// the blocks in rounds of at most q elements per block, so messages and scratch stay bounded.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/reduce_kernels.h"

namespace hvd::collectives {
namespace {

constexpr size_t kTileBytes = 16 << 10;

struct Layout {
  std::vector<size_t> counts;  // elements per block
  std::vector<size_t> starts;  // first element of each block
  size_t largest = 0;
  // Elements of block j handled in the round starting at element `from` of each block.
  size_t len(int j, size_t from) const { return counts[j] > from ? std::min(counts[j] - from, q) : 0; }
  size_t q = 0;
};

// Round: publish my sub-block of every other block, barrier, reduce my block's sub-block over
// all members in rank order (my part read from `in`). One barrier per round (double buffering).
void reducescatterShared(Communicator& comm, SharedSpace& space, const uint8_t* in, uint8_t* out, Layout& layout,
                         const ReduceKernel& kernel) {
  const int n = comm.size(), me = comm.rank();
  const size_t elem = kernel.elementSize;
  layout.q = sharedHalfBytes(space) / (static_cast<size_t>(n) * elem);
  const size_t tileElems = kTileBytes / elem;
  alignas(64) uint8_t tile[kTileBytes];
  for (size_t from = 0; from < layout.largest; from += layout.q) {
    const uint64_t phase = comm.nextSharedPhase();
    uint8_t* mine = sharedHalf(space, me, phase);
    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      std::memcpy(mine + j * layout.q * elem, in + (layout.starts[j] + from) * elem, layout.len(j, from) * elem);
    }
    space.barrier(comm.deadline());
    const size_t len = layout.len(me, from);
    for (size_t t = 0; t < len; t += tileElems) {
      const size_t m = std::min(tileElems, len - t);
      auto input = [&](int j) -> const uint8_t* {
        return j == me ? in + (layout.starts[me] + from + t) * elem
                       : sharedHalf(space, j, phase) + (me * layout.q + t) * elem;
      };
      kernel.to(tile, input(0), input(1), m);
      for (int j = 2; j < n; ++j) kernel.into(tile, input(j), m);
      std::memcpy(out + (from + t) * elem, tile, m * elem);
    }
  }
}

// Ring: block b's partial sum starts at rank b+1 and travels right, accumulating
// (received OP own), and completes at rank b.
void reducescatterRing(Communicator& comm, const uint8_t* in, uint8_t* out, Layout& layout,
                       const ReduceKernel& kernel) {
  const int n = comm.size(), r = comm.rank();
  const size_t elem = kernel.elementSize;
  layout.q = std::max<size_t>(1, kSegmentBytes / elem);
  const size_t scratchElems = std::min(layout.q, layout.largest);
  auto* bufA = static_cast<uint8_t*>(comm.scratch(0, scratchElems * elem));
  auto* bufB = static_cast<uint8_t*>(comm.scratch(1, scratchElems * elem));
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (size_t from = 0; from < layout.largest; from += layout.q) {
    int sendBlock = mod(r - 1, n);
    const uint8_t* sendPtr = in + (layout.starts[sendBlock] + from) * elem;
    size_t sendLen = layout.len(sendBlock, from);
    for (int s = 0; s < n - 1; ++s) {
      const int recvBlock = mod(r - s - 2, n);
      const size_t recvLen = layout.len(recvBlock, from);
      uint8_t* recvBuf = s % 2 == 0 ? bufA : bufB;
      comm.sendRecv(right, sendPtr, sendLen * elem, left, recvBuf, recvLen * elem, comm.deadline());
      const uint8_t* own = in + (layout.starts[recvBlock] + from) * elem;
      if (s < n - 2) {
        kernel.into(recvBuf, own, recvLen);
        sendPtr = recvBuf;
        sendLen = recvLen;
      } else {
        kernel.to(out + from * elem, recvBuf, own, recvLen);  // recvBlock == r
      }
    }
  }
}

}  // namespace

void reducescatter(Communicator& comm, const void* in, void* out, const std::vector<size_t>& countsPerRank,
                   DataType dtype, ReduceOp op) {
  const ReduceKernel& kernel = reduceKernel(dtype, op);
  const int n = comm.size();
  HVD_CHECK_AS(InvalidArgument, static_cast<int>(countsPerRank.size()) == n)
      << "reducescatter: " << countsPerRank.size() << " counts for " << n << " ranks";
  Layout layout;
  layout.counts = countsPerRank;
  layout.starts.assign(n, 0);
  for (int j = 1; j < n; ++j) layout.starts[j] = layout.starts[j - 1] + countsPerRank[j - 1];
  layout.largest = *std::max_element(countsPerRank.begin(), countsPerRank.end());
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (n == 1) {
    if (src != dst && countsPerRank[0] > 0) std::memmove(dst, src, countsPerRank[0] * kernel.elementSize);
    return;
  }
  if (layout.largest == 0) return;
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  if (sharedUsable(shared, n) && sharedHalfBytes(*shared) >= static_cast<size_t>(n) * kernel.elementSize) {
    reducescatterShared(comm, *shared, src, dst, layout, kernel);
  } else {
    reducescatterRing(comm, src, dst, layout, kernel);
  }
}

}  // namespace hvd::collectives
