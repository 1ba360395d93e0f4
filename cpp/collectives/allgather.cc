// allgatherv and its algorithms (the table is in algorithms.cc): over the members' shared
// outputs when the caller offers them, shared-memory rounds when the members share memory,
// hierarchical (ring across hosts, shared memory inside) when they span hosts with equally many
// members each, else a ring.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/member_buffers.h"
#include "collectives/partition.h"
#include "collectives/stream_copy.h"

namespace hvd::collectives {
namespace {

// shm_outputs: a chunk of the input is read once and written to the n outputs while it is still
// in L2.
constexpr size_t kOutputChunkBytes = size_t(256) << 10;

}  // namespace

// Round k: every rank publishes bytes [k*c, (k+1)*c) of its block (read from `in`) into its next
// half, barrier, and copies the same range of every block, its own included, from the shared
// halves into `out` while the data is still in cache. One barrier per round; c is at most
// kSharedCopyChunkBytes so the rounds pipeline (a rank publishes round k+1 while slower peers
// still copy round k out of the other half).
void allgatherShared(const AllgatherArgs& args) {
  Communicator& comm = args.comm;
  SharedSpace& space = *args.shared;
  const auto& bytes = args.bytes;
  const auto& offsets = args.offsets;
  const int n = comm.size(), me = comm.rank();
  const size_t chunk = sharedCopyChunkBytes(space);
  const size_t largest = *std::max_element(bytes.begin(), bytes.end());
  const bool inPlace = args.in == args.out + offsets[me];
  for (size_t start = 0; start < largest; start += chunk) {
    const uint64_t phase = comm.nextSharedPhase();
    if (bytes[me] > start) {
      std::memcpy(sharedHalf(space, me, phase), args.in + start, std::min(chunk, bytes[me] - start));
    }
    space.barrier(comm.deadline());
    for (int j = 0; j < n; ++j) {
      if ((j == me && inPlace) || bytes[j] <= start) continue;
      outputCopy(args.out + offsets[j] + start, sharedHalf(space, j, phase), std::min(chunk, bytes[j] - start),
                 args.total);
    }
  }
}

// shm_outputs. Protocol (every member, same point of the collective order):
//  1-2. map every member's output (member_buffers.h); if any member cannot (its output is not a
//     shared buffer, a mapping failed), every member returns false before writing anything, and
//     the dispatcher runs the next algorithm;
//  3. each member copies its own block from its input straight into EVERY member's output, in
//     chunks that stay in cache across the n destinations (streaming stores when the output is
//     large); barrier.
// Each input byte is read from memory once and each output byte written once, where the shared
// rounds copy every block through the SharedSpace first (twice the copies).
bool allgatherSharedOutputs(const AllgatherArgs& args) {
  Communicator& comm = args.comm;
  const int n = comm.size(), me = comm.rank();
  SharedSpace* space = nullptr;
  PeerMemory* peers = nullptr;
  if (!sharedOutputsUsable(comm, &space, &peers)) return false;
  MemberBuffers& members = comm.memberBuffers();
  if (!members.map(comm, *space, *peers, comm.nextSharedPhase(), args.out, args.total, "shared-output allgather")) {
    return false;
  }

  // 3. My block into every member's output, chunk by chunk.
  const size_t offset = args.offsets[static_cast<size_t>(me)];
  const size_t mine = args.bytes[static_cast<size_t>(me)];
  const bool stream = args.total >= kStreamOutputBytes;
  for (size_t start = 0; start < mine; start += kOutputChunkBytes) {
    const size_t len = std::min(kOutputChunkBytes, mine - start);
    for (int k = 1; k <= n; ++k) {
      uint8_t* dst = members.buffer((me + k) % n) + offset + start;  // the peers first, mine last
      streamOrCopy(dst, args.in + start, len, stream);
    }
  }
  if (stream) streamFence();
  space->barrier(comm.deadline());
  members.release();
  return true;
}

// Ring: at step s rank r forwards block r-s to the right and receives block r-s-1 from the left.
void allgatherRing(Communicator& comm, uint8_t* out, const std::vector<size_t>& bytes,
                   const std::vector<size_t>& offsets) {
  const int n = comm.size(), r = comm.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    int sendBlock = mod(r - s, n), recvBlock = mod(r - s - 1, n);
    comm.sendRecv(right, out + offsets[sendBlock], bytes[sendBlock], left, out + offsets[recvBlock], bytes[recvBlock],
                  comm.deadline());
  }
}

bool allgatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytesPerRank,
                const AllgatherOptions& options) {
  const int n = comm.size(), me = comm.rank();
  HVD_CHECK_AS(InvalidArgument, static_cast<int>(bytesPerRank.size()) == n)
      << "allgatherv: " << bytesPerRank.size() << " sizes for " << n << " ranks";
  std::vector<size_t> offsets(n, 0);
  for (int j = 1; j < n; ++j) offsets[j] = offsets[j - 1] + bytesPerRank[j - 1];
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  auto copyOwn = [&] {
    if (src != dst + offsets[me] && bytesPerRank[me] > 0) std::memmove(dst + offsets[me], src, bytesPerRank[me]);
  };
  if (n == 1) {
    copyOwn();
    return false;
  }
  const size_t total = offsets[n - 1] + bytesPerRank[n - 1];
  if (total == 0) return false;
  SharedSpace* shared = nullptr;
  const AllgatherAlgorithm* algo = &allgatherChoice(comm, total, options.sharedOutputs, &shared);
  const AllgatherArgs args{comm, src, dst, bytesPerRank, offsets, total, shared};
  if (algo->attempt != nullptr) {
    if (algo->attempt(args)) return true;
    algo = &allgatherChoice(comm, total, false, &shared);  // declined on every member alike
  }
  // The shared rounds copy the own block too, from the shared copy (`in` must not overlap `out`
  // elsewhere); the others work in place.
  if (!algo->readsInput) copyOwn();
  algo->run(args);
  return false;
}

}  // namespace hvd::collectives
