// "shm_inplace": the zero-copy allreduce for outputs that lie inside a shared buffer
// (transport/peer_memory.h) on every member, all members on one host. The reduction runs in place
// across the members' outputs; a member's input is either its output itself or any other tensor
// (e.g. a fresh gradient), staged into the output's other members' slices first.
//
// Protocol (every member, same point of the collective order; the dispatcher attempts it when the
// caller says the members agreed on shared outputs, AllreduceOptions::sharedOutputs):
//  0. an input other than the output: copy every slice but mine (step 3) into the output;
//  1-2. map every member's buffer (member_buffers.h: publish a descriptor in the set's
//     SharedSpace, map the peers' buffers, agree; two barriers, one in the steady state); if any
//     member cannot, every member returns false and the dispatcher runs the next algorithm
//     (nothing has been written but step 0's copy into the own output, which that one rewrites);
//  3. member i reduces slice i over all members' buffers in rank order 0..n-1 (its own part read
//     from its input), in L1-sized tiles (prescale applied per input, postscale to the result),
//     and writes the result into slice i of EVERY member's buffer; barrier.
// The result is bitwise identical on every member (each element is computed by one rank). No
// allocation per call (the transport caches the mappings). Every wait is a SharedSpace barrier
// with the communicator's deadline, which watches the peers: a dead peer gives PeerLost.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/member_buffers.h"
#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/stream_copy.h"
#include "common/logging.h"

namespace hvd::collectives {
namespace {

// Tiles stay in L1 while the n inputs are folded into them.
constexpr size_t kTileBytes = 16 << 10;

// Member `me`'s slice of `count` elements of `elem` bytes: [begin, end), whole cache lines so
// that no two members write the same line.
struct Slice {
  size_t begin, end;
};
Slice sliceOf(size_t count, size_t elem, int n, int me) {
  const size_t lineElems = std::max<size_t>(1, 64 / elem);
  const size_t sliceElems = ((count + n - 1) / n + lineElems - 1) / lineElems * lineElems;
  const size_t begin = std::min(count, sliceElems * static_cast<size_t>(me));
  return {begin, std::min(count, begin + sliceElems)};
}

// Whether a buffer of `bytes` is written with streaming stores (stream_copy.h): a large one is
// not read again before it has left the cache, and ordinary stores would first read every line
// they write (read-for-ownership).
bool streams(size_t bytes) { return bytes >= kStreamOutputBytes; }

// Before step 1, for an input outside the shared buffer: copies every slice but mine from the
// input into my buffer, where the members reducing them read it. My own slice stays in the input
// and is read from there (step 3). Large copies stream, fenced before step 1's barrier.
void stageOthersSlices(const uint8_t* input, uint8_t* mine, size_t count, size_t elem, int n, int me) {
  const Slice own = sliceOf(count, elem, n, me);
  const bool stream = streams(count * elem);
  streamOrCopy(mine, input, own.begin * elem, stream);
  streamOrCopy(mine + own.end * elem, input + own.end * elem, (count - own.end) * elem, stream);
  if (stream) streamFence();
}

// Step 3 of the protocol (steps 1-2: member_buffers.h): member `me` of `n` reduces its slice of
// the `count` elements over the members' buffers `out` (rank order), reading its own contribution
// from `ownInput` (its buffer, or the input it was staged from), and writes the result into every
// member's buffer. The other buffers' lines of the slice were just read, so they are written with
// ordinary stores; my own buffer's were not when my input is elsewhere, and a large one is
// streamed into.
//
// The folds accumulate in the buffer of member 0 or 1 (whose inputs the first fold consumes
// before it overwrites them), never mine. When my input is elsewhere, the last fold also writes
// my buffer from the same registers (ReduceKernel::toAndCopy). In place it does not: there both
// destinations are buffers the fold just read, and writing them line by line in turn ran at 0.6x
// the tile-by-tile writes for 256 MiB buffers on the development VM (unexplained; 1.1-1.8x at
// 16-240 MiB), so the accumulator's tile is finished first and copied while it is in L1, like
// any other member's.
void reduceSlice(const AllreduceArgs& args, int n, int me, uint8_t* const* out, const uint8_t* ownInput) {
  const DataType dtype = args.dtype;
  const size_t count = args.count;
  const size_t elem = args.kernel.elementSize;
  const double pre = args.prescale;
  const double post = args.postscale;
  const ReduceKernel& kernel = args.kernel;
  const Slice slice = sliceOf(count, elem, n, me);
  const size_t tileElems = kTileBytes / elem;
  auto in = [&](int j) -> const uint8_t* { return j == me ? ownInput : out[j]; };
  const bool inPlace = ownInput == out[me];
  const bool streamMine = !inPlace && streams(count * elem);
  const bool fused = pre == 1.0 && !inPlace;  // the last fold also writes my buffer
  const int acc = me == 0 ? 1 : 0;
  alignas(64) uint8_t tile[kTileBytes];
  alignas(64) uint8_t scaled[kTileBytes];
  for (size_t t = slice.begin; t < slice.end; t += tileElems) {
    const size_t len = std::min(tileElems, slice.end - t);
    const size_t at = t * elem;
    uint8_t* result = out[acc] + at;
    if (pre == 1.0) {
      const uint8_t* left = in(0) + at;
      for (int j = 1; j < n - 1; ++j, left = result) kernel.to(result, left, in(j) + at, len);
      if (fused) {
        kernel.toAndCopy(result, out[me] + at, left, in(n - 1) + at, len, post, streamMine);
      } else {
        kernel.to(result, left, in(n - 1) + at, len);
        scaleBuffer(result, len, dtype, post);
      }
    } else {
      // Like the staged path: every input is scaled before it is reduced (in a tile: the
      // accumulator is written once all inputs are read).
      std::memcpy(tile, in(0) + at, len * elem);
      scaleBuffer(tile, len, dtype, pre);
      for (int j = 1; j < n; ++j) {
        std::memcpy(scaled, in(j) + at, len * elem);
        scaleBuffer(scaled, len, dtype, pre);
        kernel.into(tile, scaled, len);
      }
      scaleBuffer(tile, len, dtype, post);
      std::memcpy(result, tile, len * elem);
    }
    for (int j = 0; j < n; ++j) {
      if (j == acc || (j == me && fused)) continue;
      streamOrCopy(out[j] + at, result, len * elem, streamMine && j == me);
    }
  }
  if (streamMine) streamFence();  // before the barrier that publishes the result
}

}  // namespace

bool allreduceSharedInPlace(const AllreduceArgs& args) {
  Communicator& comm = args.comm;
  const int n = comm.size(), me = comm.rank();
  SharedSpace* space = nullptr;
  PeerMemory* peers = nullptr;
  if (args.io != nullptr || !sharedOutputsUsable(comm, &space, &peers)) return false;
  const size_t elem = args.kernel.elementSize;
  auto* mine = static_cast<uint8_t*>(args.buf);
  const auto* input = static_cast<const uint8_t*>(args.in);
  // Safe before step 1: the last operation on my buffer ended with a barrier, and step 1's
  // barrier publishes these writes. Should map() decline, the next algorithm rewrites the output.
  if (input != mine) stageOthersSlices(input, mine, args.count, elem, n, me);
  MemberBuffers& members = comm.memberBuffers();
  if (!members.map(comm, *space, *peers, comm.nextSharedPhase(), mine, args.count * elem,
                   "shared in-place allreduce")) {
    return false;
  }

  // 3. Reduce my slice over every member's buffer, write it into every member's buffer.
  reduceSlice(args, n, me, members.buffers(), input);  // input == mine when in place
  space->barrier(comm.deadline());
  members.release();
  return true;
}

}  // namespace hvd::collectives
