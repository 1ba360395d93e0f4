#include "engine/shared_inplace.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/reduce_kernels.h"
#include "common/check.h"
#include "common/logging.h"
#include "engine/shared_buffers.h"
#include "transport/shm/segment.h"

namespace hvd::engine {
namespace {

// Tiles stay in L1 while the n inputs are folded into them.
constexpr size_t kTileBytes = 16 << 10;
// Peer mappings kept per process; the least recently used beyond this are unmapped.
constexpr size_t kMaxMappings = 256;

// Published by each member at the start of its half of the SharedSpace.
struct alignas(64) ControlSlot {
  int64_t pid;
  int64_t fd;
  uint64_t id;        // 0: this member has no shared buffer for the op (never mapped)
  uint64_t segBytes;
  uint64_t base;      // the owner's address of the segment (used when the peer is this process)
  uint64_t offset;    // of the tensor in the segment, bytes
  uint64_t count;     // elements
  uint64_t ok;        // written after the first barrier: this member mapped every peer
};

// Process-wide cache of peers' segments, by (pid, id): ids are never reused within a process.
class PeerMappings {
 public:
  // The base of the peer's segment in this process; throws hvd::Error when it cannot be mapped.
  uint8_t* map(const ControlSlot& s, std::shared_ptr<shm::Segment>& hold) {
    if (s.pid == static_cast<int64_t>(::getpid())) {
      hold.reset();
      return reinterpret_cast<uint8_t*>(s.base);
    }
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_pair(s.pid, s.id);
    auto it = map_.find(key);
    if (it == map_.end()) {
      auto segment = std::make_shared<shm::Segment>(
          shm::Segment::open("fd:" + std::to_string(s.pid) + ":" + std::to_string(s.fd), s.segBytes));
      if (map_.size() >= kMaxMappings) evictOldest();
      it = map_.emplace(key, Mapping{std::move(segment), 0}).first;
    }
    it->second.lastUse = ++clock_;
    hold = it->second.segment;  // alive for this op even if evicted meanwhile
    return it->second.segment->data();
  }

 private:
  struct Mapping {
    std::shared_ptr<shm::Segment> segment;
    uint64_t lastUse;
  };
  void evictOldest() {
    auto oldest = std::min_element(map_.begin(), map_.end(),
                                   [](const auto& a, const auto& b) { return a.second.lastUse < b.second.lastUse; });
    map_.erase(oldest);
  }
  std::mutex mu_;
  std::map<std::pair<int64_t, uint64_t>, Mapping> map_;
  uint64_t clock_ = 0;
};

PeerMappings& peerMappings() {
  static PeerMappings* m = new PeerMappings();  // never destroyed (no teardown-order issues)
  return *m;
}

// A segment a member mapped (or owns), as published in its slot after the ControlSlot.
struct SeenSegment {
  int64_t pid;
  uint64_t id;
};

// Per thread, reused so that steady-state calls allocate nothing.
struct Scratch {
  std::vector<uint8_t*> buffers;
  std::vector<std::shared_ptr<shm::Segment>> holds;
};

// Per communicator: the members' segments of its last completed op in this process (all mapped
// then). Process-wide, not per thread: a rank's operations run on whichever thread drives its
// engine (runtime.h). Keyed by address: a stale entry after a communicator is destroyed and its
// address reused only claims segments this process did map, which the mapping cache may still
// hold. The vector of a communicator is used only by the thread running that communicator's
// engine; the mutex guards the map.
std::vector<SeenSegment>& lastSeenOf(const Communicator& comm) {
  static std::mutex mu;
  static auto* seen = new std::map<const Communicator*, std::vector<SeenSegment>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  return (*seen)[&comm];  // map nodes are stable
}

std::atomic<uint64_t> completed{0};

// Step 3 of the protocol: member `me` of `n` reduces its slice of the `count` elements over the
// members' buffers `in` (rank order) and writes the result into every member's buffer.
void reduceSlice(const Response& r, size_t count, int n, int me, uint8_t* const* in) {
  const DataType dtype = r.dtype;
  const size_t elem = dataTypeSize(dtype);
  const ReduceOp op = r.op == ReduceOp::kAverage ? ReduceOp::kSum : r.op;
  const double pre = r.prescale;
  const double post = r.op == ReduceOp::kAverage ? r.postscale / n : r.postscale;
  const ReduceKernel& kernel = reduceKernel(dtype, op);
  const size_t lineElems = std::max<size_t>(1, 64 / elem);
  const size_t sliceElems = ((count + n - 1) / n + lineElems - 1) / lineElems * lineElems;
  const size_t begin = std::min(count, sliceElems * static_cast<size_t>(me));
  const size_t end = std::min(count, begin + sliceElems);
  const size_t tileElems = kTileBytes / elem;
  alignas(64) uint8_t tile[kTileBytes];
  alignas(64) uint8_t scaled[kTileBytes];
  for (size_t t = begin; t < end; t += tileElems) {
    const size_t len = std::min(tileElems, end - t);
    const size_t at = t * elem;
    if (pre == 1.0) {
      kernel.to(tile, in[0] + at, in[1] + at, len);
      for (int j = 2; j < n; ++j) kernel.into(tile, in[j] + at, len);
    } else {
      // Like the staged path: every input is scaled before it is reduced.
      std::memcpy(tile, in[0] + at, len * elem);
      scaleBuffer(tile, len, dtype, pre);
      for (int j = 1; j < n; ++j) {
        std::memcpy(scaled, in[j] + at, len * elem);
        scaleBuffer(scaled, len, dtype, pre);
        kernel.into(tile, scaled, len);
      }
    }
    if (post != 1.0) scaleBuffer(tile, len, dtype, post);
    for (int j = 0; j < n; ++j) std::memcpy(in[j] + at, tile, len * elem);
  }
}

}  // namespace

uint64_t sharedInPlaceCount() { return completed.load(std::memory_order_relaxed); }

bool sharedInPlaceAllreduce(const Response& r, Communicator& comm, const std::vector<Entry*>& entries) {
  const int n = comm.size(), me = comm.rank();
  if (n < 2 || r.tensors.size() != 1) return false;
  SharedSpace* space = comm.sharedSpace(comm.deadline());
  const size_t slotBytes = sizeof(ControlSlot) + sizeof(SeenSegment) * static_cast<size_t>(n);
  if (!collectives::sharedUsable(space, n) || slotBytes > collectives::sharedHalfBytes(*space)) return false;
  const DataType dtype = r.dtype;
  const size_t elem = dataTypeSize(dtype);
  const size_t count = static_cast<size_t>(r.tensors[0].numElements());
  const uint64_t phase = comm.nextSharedPhase();
  auto slotOf = [&](int j) { return reinterpret_cast<ControlSlot*>(collectives::sharedHalf(*space, j, phase)); };
  auto seenOf = [&](int j) { return reinterpret_cast<SeenSegment*>(slotOf(j) + 1); };
  thread_local Scratch scratch;

  // 1. Publish where my tensor lives, and which peer segments I mapped in my last op on this
  //    communicator.
  Entry* entry = entries.empty() ? nullptr : entries[0];
  ControlSlot* mine = slotOf(me);
  *mine = ControlSlot{};
  mine->pid = ::getpid();
  SharedBufferInfo info;
  if (entry != nullptr && entry->input == entry->output &&
      findSharedBuffer(entry->output, count * elem, &info)) {
    mine->fd = info.fd;
    mine->id = info.id;
    mine->segBytes = info.bytes;
    mine->base = reinterpret_cast<uint64_t>(info.base);
    mine->offset = static_cast<uint64_t>(static_cast<uint8_t*>(entry->output) - info.base);
    mine->count = count;
  }
  std::vector<SeenSegment>& lastSeen = lastSeenOf(comm);
  lastSeen.resize(static_cast<size_t>(n));
  std::memcpy(seenOf(me), lastSeen.data(), sizeof(SeenSegment) * static_cast<size_t>(n));
  space->barrier(comm.deadline());

  // Every member eligible, and every member mapped every peer's current segment before (the
  // steady state): no agreement round needed. All members compute this from the same data.
  bool eligible = true, mappedBefore = true;
  for (int j = 0; j < n; ++j) {
    const ControlSlot& s = *slotOf(j);
    if (s.id == 0 || s.count != count) eligible = false;
    for (int k = 0; k < n && mappedBefore; ++k) {
      const SeenSegment& seen = seenOf(j)[k];
      if (k != j && (seen.pid != slotOf(k)->pid || seen.id != slotOf(k)->id)) mappedBefore = false;
    }
  }
  if (!eligible) return false;  // before any mapping: every member returns here alike

  // 2. Map the peers' buffers (cached); unless all were mapped before, agree that everyone could.
  scratch.buffers.assign(static_cast<size_t>(n), nullptr);
  scratch.holds.resize(static_cast<size_t>(n));
  bool ok = true;
  for (int j = 0; j < n && ok; ++j) {
    const ControlSlot& s = *slotOf(j);
    try {
      uint8_t* base = j == me ? info.base : peerMappings().map(s, scratch.holds[j]);
      scratch.buffers[j] = base + s.offset;
    } catch (const Error& e) {
      if (mappedBefore) {
        // Mapped once and evicted, and now it fails: the peers are already reducing. Fatal, so
        // that they fail at once (the runtime aborts the transport) instead of timing out.
        throw Aborted("shared in-place allreduce: cannot map the buffer of rank " +
                      std::to_string(comm.globalRank(j)) + " again: " + e.what());
      }
      HVD_LOG(Warning) << "shared in-place allreduce: cannot map the buffer of rank " << comm.globalRank(j) << " ("
                       << e.what() << "); using the staged path";
      ok = false;
    }
  }
  if (!mappedBefore) {
    mine->ok = ok ? 1 : 0;
    space->barrier(comm.deadline());
    for (int j = 0; j < n; ++j) ok = ok && slotOf(j)->ok == 1;
    if (!ok) {
      for (auto& h : scratch.holds) h.reset();
      return false;
    }
  }
  for (int j = 0; j < n; ++j) lastSeen[static_cast<size_t>(j)] = SeenSegment{slotOf(j)->pid, slotOf(j)->id};

  // 3. Reduce my slice over every member's buffer, write it into every member's buffer.
  reduceSlice(r, count, n, me, scratch.buffers.data());
  space->barrier(comm.deadline());
  for (auto& h : scratch.holds) h.reset();
  if (completed.fetch_add(1, std::memory_order_relaxed) == 0) {
    HVD_LOG(Debug) << "shared in-place allreduce in use (first: " << count << " x " << dataTypeName(dtype) << " over "
                   << n << " ranks)";
  }
  return true;
}

}  // namespace hvd::engine
