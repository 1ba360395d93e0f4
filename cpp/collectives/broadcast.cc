// broadcast: shared-memory chunks when the members share memory; hierarchical (one leader per
// host over point-to-point, then shared memory) when they span hosts; otherwise a binomial tree
// for small messages and a pipelined chain (root, root+1, ...) for large ones.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/partition.h"
#include "collectives/stream_copy.h"

namespace hvd::collectives {
namespace {

constexpr size_t kTreeMaxBytes = size_t(256) << 10;

// Binomial tree on ranks relative to the root (v = r - root): v receives from v - lowbit(v),
// then sends to v + m for each power of two m below lowbit(v) (below n for the root).
void broadcastTree(Communicator& comm, uint8_t* buf, size_t bytes, int root) {
  const int n = comm.size();
  const int v = mod(comm.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      comm.recv(mod(v - mask + root, n), buf, bytes, comm.deadline());
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) comm.send(mod(v + mask + root, n), buf, bytes, comm.deadline());
  }
}

// Chain root -> root+1 -> ... in segments: while passing segment k-1 on, receive segment k.
void broadcastChain(Communicator& comm, uint8_t* buf, size_t bytes, int root) {
  const int n = comm.size();
  const int v = mod(comm.rank() - root, n);
  const int next = mod(comm.rank() + 1, n), prev = mod(comm.rank() - 1, n);
  const bool hasNext = v + 1 < n, hasPrev = v > 0;
  const size_t segments = (bytes + kSegmentBytes - 1) / kSegmentBytes;
  auto seg = [&](size_t k) { return std::min(kSegmentBytes, bytes - k * kSegmentBytes); };
  for (size_t k = 0; k <= segments; ++k) {
    // Send segment k-1 (already held), receive segment k.
    bool doSend = hasNext && k > 0;
    bool doRecv = hasPrev && k < segments;
    uint8_t* sendPtr = doSend ? buf + (k - 1) * kSegmentBytes : nullptr;
    uint8_t* recvPtr = doRecv ? buf + k * kSegmentBytes : nullptr;
    size_t sendLen = doSend ? seg(k - 1) : 0, recvLen = doRecv ? seg(k) : 0;
    if (doSend && doRecv) {
      comm.sendRecv(next, sendPtr, sendLen, prev, recvPtr, recvLen, comm.deadline());
    } else if (doSend) {
      comm.send(next, sendPtr, sendLen, comm.deadline());
    } else if (doRecv) {
      comm.recv(prev, recvPtr, recvLen, comm.deadline());
    }
  }
}

}  // namespace

// Root publishes a chunk into its next half, barrier, the others copy it out. Chunks of at most
// kSharedCopyChunkBytes: the root fills chunk k+1 while the others copy chunk k (still cached).
void broadcastShared(Communicator& comm, SharedSpace& space, uint8_t* buf, size_t bytes, int root) {
  const size_t half = sharedCopyChunkBytes(space);
  const bool isRoot = space.memberIndex() == root;
  for (size_t offset = 0; offset < bytes; offset += half) {
    const size_t len = std::min(half, bytes - offset);
    const uint64_t phase = space.nextPhase();
    if (isRoot) std::memcpy(sharedHalf(space, root, phase), buf + offset, len);
    space.barrier(comm.deadline());
    if (!isRoot) outputCopy(buf + offset, sharedHalf(space, root, phase), len, bytes);
  }
}

void broadcast(Communicator& comm, void* buf, size_t bytes, int root) {
  const int n = comm.size();
  HVD_CHECK_AS(InvalidArgument, root >= 0 && root < n) << "broadcast: root " << root << " of " << n;
  if (n == 1 || bytes == 0) return;
  auto* data = static_cast<uint8_t*>(buf);
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  if (sharedUsable(shared, n)) {
    broadcastShared(comm, *shared, data, bytes, root);
  } else if (hierarchicalUsable(comm, false)) {
    broadcastHierarchical(comm, data, bytes, root);
  } else if (bytes <= kTreeMaxBytes) {
    broadcastTree(comm, data, bytes, root);
  } else {
    broadcastChain(comm, data, bytes, root);
  }
}

}  // namespace hvd::collectives
