#include "engine/member_buffers.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "collectives/partition.h"
#include "common/check.h"
#include "common/logging.h"
#include "engine/shared_buffers.h"
#include "transport/shm/segment.h"

namespace hvd::engine {
namespace {

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
  uint64_t bytes;     // of the buffer for this op
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

}  // namespace

size_t MemberBuffers::controlBytes(int n) {
  return sizeof(ControlSlot) + sizeof(SeenSegment) * static_cast<size_t>(n);
}

bool MemberBuffers::map(Communicator& comm, SharedSpace& space, uint64_t phase, void* mine, size_t bytes,
                        const char* what) {
  const int n = comm.size(), me = comm.rank();
  HVD_CHECK(controlBytes(n) <= collectives::sharedHalfBytes(space)) << what << ": shared space too small";
  auto slotOf = [&](int j) { return reinterpret_cast<ControlSlot*>(collectives::sharedHalf(space, j, phase)); };
  auto seenOf = [&](int j) { return reinterpret_cast<SeenSegment*>(slotOf(j) + 1); };

  // 1. Publish where my buffer lives, and which peer segments I mapped in my last op on this
  //    communicator.
  ControlSlot* slot = slotOf(me);
  *slot = ControlSlot{};
  slot->pid = ::getpid();
  SharedBufferInfo info;
  if (mine != nullptr && findSharedBuffer(mine, bytes, &info)) {
    slot->fd = info.fd;
    slot->id = info.id;
    slot->segBytes = info.bytes;
    slot->base = reinterpret_cast<uint64_t>(info.base);
    slot->offset = static_cast<uint64_t>(static_cast<uint8_t*>(mine) - info.base);
    slot->bytes = bytes;
  }
  std::vector<SeenSegment>& lastSeen = lastSeenOf(comm);
  lastSeen.resize(static_cast<size_t>(n));
  std::memcpy(seenOf(me), lastSeen.data(), sizeof(SeenSegment) * static_cast<size_t>(n));
  space.barrier(comm.deadline());

  // Every member eligible, and every member mapped every peer's current segment before (the
  // steady state): no agreement round needed. All members compute this from the same data.
  bool eligible = true, mappedBefore = true;
  for (int j = 0; j < n; ++j) {
    const ControlSlot& s = *slotOf(j);
    if (s.id == 0 || s.bytes != bytes) eligible = false;
    for (int k = 0; k < n && mappedBefore; ++k) {
      const SeenSegment& seen = seenOf(j)[k];
      if (k != j && (seen.pid != slotOf(k)->pid || seen.id != slotOf(k)->id)) mappedBefore = false;
    }
  }
  if (!eligible) return false;  // before any mapping: every member returns here alike

  // 2. Map the peers' buffers (cached); unless all were mapped before, agree that everyone could.
  buffers_.assign(static_cast<size_t>(n), nullptr);
  holds_.resize(static_cast<size_t>(n));
  bool ok = true;
  for (int j = 0; j < n && ok; ++j) {
    const ControlSlot& s = *slotOf(j);
    try {
      uint8_t* base = j == me ? info.base : peerMappings().map(s, holds_[static_cast<size_t>(j)]);
      buffers_[static_cast<size_t>(j)] = base + s.offset;
    } catch (const Error& e) {
      if (mappedBefore) {
        // Mapped once and evicted, and now it fails: the peers are already at work. Fatal, so
        // that they fail at once (the runtime aborts the transport) instead of timing out.
        throw Aborted(std::string(what) + ": cannot map the buffer of rank " + std::to_string(comm.globalRank(j)) +
                      " again: " + e.what());
      }
      HVD_LOG(Warning) << what << ": cannot map the buffer of rank " << comm.globalRank(j) << " (" << e.what()
                       << "); using the staged path";
      ok = false;
    }
  }
  if (!mappedBefore) {
    slot->ok = ok ? 1 : 0;
    space.barrier(comm.deadline());
    for (int j = 0; j < n; ++j) ok = ok && slotOf(j)->ok == 1;
    if (!ok) {
      release();
      return false;
    }
  }
  for (int j = 0; j < n; ++j) lastSeen[static_cast<size_t>(j)] = SeenSegment{slotOf(j)->pid, slotOf(j)->id};
  return true;
}

void MemberBuffers::release() {
  for (auto& h : holds_) h.reset();
}

}  // namespace hvd::engine
