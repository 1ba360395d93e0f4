// Small helpers shared by the algorithms (internal to collectives/).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace hvd::collectives {

// Block b of `count` elements split into n nearly equal blocks (the first count % n get one
// more), as [begin, begin + size).
struct Block {
  size_t begin;
  size_t size;
};
inline Block evenBlock(size_t count, int n, int b) {
  size_t q = count / n, rem = count % n, ub = static_cast<size_t>(b);
  return {ub * q + std::min(ub, rem), q + (ub < rem ? 1 : 0)};
}

// One chunk of a pipelined reduce-scatter + gather through shared memory: `count` elements at
// `offset` of the message, cut into member slices of `sliceElems` (slice j starts at
// j * sliceElems; the last ones are clipped or empty), passed through the shared halves of
// `phase`.
struct Chunk {
  size_t offset = 0, count = 0, sliceElems = 0;
  uint64_t phase = 0;
  Block slice(int j) const {
    size_t begin = std::min(count, sliceElems * static_cast<size_t>(j));
    return Block{begin, std::min(count, begin + sliceElems) - begin};
  }
};

// The slice length (elements) of the chunked shared-memory allreduces for `count` elements of
// `elem` bytes among `members`, chunks of at most `chunkElems`: one slice geometry for every
// chunk of a call (the last chunk is clipped), so a rank's result region never moves into
// another rank's input region between chunks; chunks about equal, so the last one does not leave
// most ranks idle; slices of whole cache lines, so ranks never write the same line.
inline size_t sliceElemsFor(size_t count, size_t chunkElems, int members, size_t elem) {
  const size_t n = static_cast<size_t>(members);
  const size_t lineElems = 64 / elem;
  const size_t chunks = (count + chunkElems - 1) / chunkElems;
  const size_t perChunk = (count + chunks - 1) / chunks;
  size_t sliceElems = ((perChunk + n - 1) / n + lineElems - 1) / lineElems * lineElems;
  if (sliceElems * n > chunkElems) sliceElems = chunkElems / n / lineElems * lineElems;
  return sliceElems;
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Upper bound on bytes one step of a pipelined point-to-point algorithm sends, so a ring over a
// bounded shared-memory channel can stream and scratch stays bounded.
constexpr size_t kSegmentBytes = size_t(1) << 20;

// One half of a member's shared buffer (double buffering: consecutive shared chunks alternate
// halves, so a rank may fill the next half while slower peers still read the previous one; the
// barrier of chunk i guarantees everyone finished reading chunk i-2's half).
inline size_t sharedHalfBytes(const SharedSpace& space) { return space.capacity() / 2 / 64 * 64; }
inline uint8_t* sharedHalf(SharedSpace& space, int member, uint64_t phase) {
  return static_cast<uint8_t*>(space.buffer(member)) + (phase & 1) * sharedHalfBytes(space);
}
// Chunk of the copy-only shared-memory collectives (allgather, broadcast): small enough that a
// chunk a rank just published is still in cache when its peers copy it out, and that the copy
// of chunk k+1 overlaps the peers' copy-out of chunk k; large enough that the one barrier per
// chunk (a few us) stays a few percent of its copies.
constexpr size_t kSharedCopyChunkBytes = size_t(1) << 20;
inline size_t sharedCopyChunkBytes(const SharedSpace& space) {
  return std::min(sharedHalfBytes(space), kSharedCopyChunkBytes);
}

// A SharedSpace is worth using when each half holds at least one cache line per member.
inline bool sharedUsable(const SharedSpace* space, int n) {
  return space != nullptr && sharedHalfBytes(*space) >= static_cast<size_t>(n) * 64 + 64;
}

}  // namespace hvd::collectives
