// broadcast: shared-memory chunks when the members share memory; hierarchical (one leader per
// host over point-to-point, then shared memory) when they span hosts; otherwise a binomial tree
// for small messages and a pipelined chain (root, root+1, ...) for large ones.
#include <algorithm>
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

// A message of one chunk is streamed from this size up (below it, one piece is the whole message
// and the extra hand-off would only add latency).
constexpr size_t kStreamedMinBytes = size_t(16) << 10;
// It is cut into at most this many pieces of at least kMinPieceBytes.
constexpr size_t kMaxPieces = 8;
constexpr size_t kMinPieceBytes = size_t(8) << 10;

// One chunk, streamed: a barrier first (everyone is done with this half's previous use), then the
// root copies the message in pieces and publishes each; the others copy each piece out as soon
// as it is published, so the root's copy and theirs overlap. Progress values are unique per
// phase: (phase + 1) << 16 | pieces done.
void broadcastStreamed(Communicator& comm, SharedSpace& space, uint8_t* buf, size_t bytes, int root) {
  const uint64_t phase = space.nextPhase();
  uint8_t* shared = sharedHalf(space, root, phase);
  const bool isRoot = space.memberIndex() == root;
  const size_t piece = std::max(kMinPieceBytes, (bytes / kMaxPieces + 63) / 64 * 64);
  const uint64_t base = (phase + 1) << 16;
  space.barrier(comm.deadline());
  uint64_t k = 0;
  for (size_t offset = 0; offset < bytes; offset += piece) {
    const size_t len = std::min(piece, bytes - offset);
    ++k;
    if (isRoot) {
      std::memcpy(shared + offset, buf + offset, len);
      space.publish(base | k);
    } else {
      space.awaitPublished(root, base | k, comm.deadline());
      std::memcpy(buf + offset, shared + offset, len);
    }
  }
}

}  // namespace

// Root publishes a chunk into its next half, barrier, the others copy it out. Chunks of at most
// kSharedCopyChunkBytes: the root fills chunk k+1 while the others copy chunk k (still cached).
// A message of one chunk is streamed instead (broadcastStreamed).
void broadcastShared(Communicator& comm, SharedSpace& space, uint8_t* buf, size_t bytes, int root) {
  const size_t half = sharedCopyChunkBytes(space);
  if (bytes >= kStreamedMinBytes && bytes <= half) {
    broadcastStreamed(comm, space, buf, bytes, root);
    return;
  }
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
