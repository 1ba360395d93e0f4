#include "engine/shared_allgather.h"

#include <algorithm>
#include <atomic>

#include "collectives/partition.h"
#include "collectives/stream_copy.h"
#include "common/logging.h"
#include "engine/member_buffers.h"
#include "engine/output_pool.h"

namespace hvd::engine {
namespace {

// A chunk of the input is read once and written to the n outputs while it is still in L2.
constexpr size_t kChunkBytes = size_t(256) << 10;

std::atomic<uint64_t> completed{0};

}  // namespace

uint64_t sharedAllgatherCount() { return completed.load(std::memory_order_relaxed); }

bool sharedAllgatherWanted(Communicator& comm, size_t totalBytes) {
  const int n = comm.size();
  if (n < 2 || totalBytes < OutputPool::kMinPooledBytes) return false;
  SharedSpace* space = comm.sharedSpace(comm.deadline());
  return collectives::sharedUsable(space, n) && MemberBuffers::controlBytes(n) <= collectives::sharedHalfBytes(*space);
}

bool sharedOutputAllgather(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytesPerRank) {
  const int n = comm.size(), me = comm.rank();
  size_t total = 0;
  for (size_t b : bytesPerRank) total += b;
  if (!sharedAllgatherWanted(comm, total)) return false;
  SharedSpace& space = *comm.sharedSpace(comm.deadline());
  thread_local MemberBuffers members;
  if (!members.map(comm, space, comm.nextSharedPhase(), out, total, "shared-output allgather")) return false;

  // 3. My block into every member's output, chunk by chunk.
  size_t offset = 0;
  for (int j = 0; j < me; ++j) offset += bytesPerRank[static_cast<size_t>(j)];
  const size_t mine = bytesPerRank[static_cast<size_t>(me)];
  const bool stream = total >= collectives::kStreamOutputBytes;
  const auto* src = static_cast<const uint8_t*>(in);
  for (size_t start = 0; start < mine; start += kChunkBytes) {
    const size_t len = std::min(kChunkBytes, mine - start);
    for (int k = 1; k <= n; ++k) {
      uint8_t* dst = members.buffer((me + k) % n) + offset + start;  // the peers first, mine last
      collectives::streamOrCopy(dst, src + start, len, stream);
    }
  }
  if (stream) collectives::streamFence();
  space.barrier(comm.deadline());
  members.release();
  if (completed.fetch_add(1, std::memory_order_relaxed) == 0) {
    HVD_LOG(Debug) << "shared-output allgather in use (first: " << total << " bytes over " << n << " ranks)";
  }
  return true;
}

}  // namespace hvd::engine
