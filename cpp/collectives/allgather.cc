// allgatherv: shared-memory rounds when the members share memory; hierarchical (ring across hosts,
// shared memory inside) when they span hosts with equally many members each; else a ring.
#include <cstring>
#include <numeric>

#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/partition.h"
#include "collectives/stream_copy.h"

namespace hvd::collectives {
namespace {

// Round k: every rank publishes bytes [k*c, (k+1)*c) of its block (read from `in`) into its next
// half, barrier, and copies the same range of every block, its own included, from the shared
// halves into `out` while the data is still in cache. One barrier per round; c is at most
// kSharedCopyChunkBytes so the rounds pipeline (a rank publishes round k+1 while slower peers
// still copy round k out of the other half).
void allgatherShared(Communicator& comm, SharedSpace& space, const uint8_t* in, uint8_t* out,
                     const std::vector<size_t>& bytes, const std::vector<size_t>& offsets) {
  const int n = comm.size(), me = comm.rank();
  const size_t chunk = sharedCopyChunkBytes(space);
  const size_t largest = *std::max_element(bytes.begin(), bytes.end());
  const bool inPlace = in == out + offsets[me];
  const size_t total = offsets.back() + bytes.back();
  for (size_t start = 0; start < largest; start += chunk) {
    const uint64_t phase = comm.nextSharedPhase();
    if (bytes[me] > start) {
      std::memcpy(sharedHalf(space, me, phase), in + start, std::min(chunk, bytes[me] - start));
    }
    space.barrier(comm.deadline());
    for (int j = 0; j < n; ++j) {
      if ((j == me && inPlace) || bytes[j] <= start) continue;
      outputCopy(out + offsets[j] + start, sharedHalf(space, j, phase), std::min(chunk, bytes[j] - start), total);
    }
  }
}

}  // namespace

// Ring: at step s rank r forwards block r-s to the right and receives block r-s-1 from the left.
void allgatherRing(Communicator& comm, uint8_t* out, const std::vector<size_t>& bytes,
                   const std::vector<size_t>& offsets) {
  const int n = comm.size(), r = comm.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    int sendBlock = mod(r - s, n), recvBlock = mod(r - s - 1, n);
    comm.sendRecv(right, out + offsets[sendBlock], bytes[sendBlock], left, out + offsets[recvBlock],
                  bytes[recvBlock], comm.deadline());
  }
}

void allgatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytesPerRank) {
  const int n = comm.size(), me = comm.rank();
  HVD_CHECK_AS(InvalidArgument, static_cast<int>(bytesPerRank.size()) == n)
      << "allgatherv: " << bytesPerRank.size() << " sizes for " << n << " ranks";
  std::vector<size_t> offsets(n, 0);
  for (int j = 1; j < n; ++j) offsets[j] = offsets[j - 1] + bytesPerRank[j - 1];
  auto* dst = static_cast<uint8_t*>(out);
  auto copyOwn = [&] {
    if (in != dst + offsets[me] && bytesPerRank[me] > 0) std::memmove(dst + offsets[me], in, bytesPerRank[me]);
  };
  if (n == 1) return copyOwn();
  size_t total = offsets[n - 1] + bytesPerRank[n - 1];
  if (total == 0) return;
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  if (sharedUsable(shared, n)) {
    // Copies its own block too, from the shared copy (`in` must not overlap `out` elsewhere).
    allgatherShared(comm, *shared, static_cast<const uint8_t*>(in), dst, bytesPerRank, offsets);
    return;
  }
  copyOwn();
  if (hierarchicalUsable(comm, true)) {
    allgatherHierarchical(comm, dst, bytesPerRank, offsets);
  } else {
    allgatherRing(comm, dst, bytesPerRank, offsets);
  }
}

}  // namespace hvd::collectives
