#include "collectives/member_buffers.h"

#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/params.h"

namespace hvd::collectives {
namespace {

const Param<bool> kSharedInPlace("HOROVOD_SHARED_INPLACE", true,
                                 "Allreduce in place inside buffers from hvd::allocateShared / _core.shared_buffer "
                                 "(DistributedOptimizer's gradient buckets) reduces directly in the ranks' shared "
                                 "buffers on one host (no staging copies), and large allgathers write straight into "
                                 "every rank's output. 0 = always take the staged paths.");

// Published by each member at the start of its half of the SharedSpace.
struct alignas(64) ControlSlot {
  SharedBufferInfo buffer;  // buffer.id 0: this member has no shared buffer for the op
  uint64_t offset;          // of the operation's bytes in the buffer
  uint64_t bytes;           // of the operation
  uint64_t ok;              // written after the first barrier: this member mapped every peer
};

}  // namespace

size_t MemberBuffers::controlBytes(int n) { return sizeof(ControlSlot) + sizeof(Seen) * static_cast<size_t>(n); }

bool MemberBuffers::map(Communicator& comm, SharedSpace& space, PeerMemory& peers, uint64_t phase, void* mine,
                        size_t bytes, const char* what) {
  const int n = comm.size(), me = comm.rank();
  HVD_CHECK(controlBytes(n) <= sharedHalfBytes(space)) << what << ": shared space too small";
  auto slotOf = [&](int j) { return reinterpret_cast<ControlSlot*>(sharedHalf(space, j, phase)); };
  auto seenOf = [&](int j) { return reinterpret_cast<Seen*>(slotOf(j) + 1); };

  // 1. Publish where my buffer lives, and which peer buffers I mapped in my last op on this
  //    communicator.
  ControlSlot* slot = slotOf(me);
  *slot = ControlSlot{};
  SharedBufferInfo& info = slot->buffer;
  if (mine != nullptr && findSharedBuffer(mine, bytes, &info)) {
    slot->offset = static_cast<uint64_t>(static_cast<uint8_t*>(mine) - info.base);
    slot->bytes = bytes;
  } else {
    info = SharedBufferInfo{};
  }
  lastSeen_.resize(static_cast<size_t>(n));
  std::memcpy(seenOf(me), lastSeen_.data(), sizeof(Seen) * static_cast<size_t>(n));
  space.barrier(comm.deadline());

  // Every member eligible, and every member mapped every peer's current buffer before (the
  // steady state): no agreement round needed. All members compute this from the same data.
  bool eligible = true, mappedBefore = true;
  for (int j = 0; j < n; ++j) {
    const ControlSlot& s = *slotOf(j);
    if (s.buffer.id == 0 || s.bytes != bytes) eligible = false;
    for (int k = 0; k < n && mappedBefore; ++k) {
      const Seen& seen = seenOf(j)[k];
      if (k != j && (seen.owner != slotOf(k)->buffer.owner || seen.id != slotOf(k)->buffer.id)) mappedBefore = false;
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
      uint8_t* base = j == me ? s.buffer.base : peers.map(s.buffer, holds_[static_cast<size_t>(j)]);
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
  for (int j = 0; j < n; ++j) lastSeen_[static_cast<size_t>(j)] = Seen{slotOf(j)->buffer.owner, slotOf(j)->buffer.id};
  return true;
}

void MemberBuffers::release() {
  for (auto& h : holds_) h.reset();
}

bool sharedOutputsUsable(Communicator& comm, SharedSpace** space, PeerMemory** peers) {
  const int n = comm.size();
  if (n < 2) return false;
  *space = comm.sharedSpace(comm.deadline());
  if (!sharedUsable(*space, n) || MemberBuffers::controlBytes(n) > sharedHalfBytes(**space)) return false;
  *peers = comm.transport().peerMemory();
  return *peers != nullptr;
}

bool sharedOutputsEnabled() {
  static const bool enabled = kSharedInPlace.get();
  return enabled;
}

bool sharedOutputsPossible(Transport& transport, const std::vector<std::string>& hostOf,
                           const std::vector<int>& setRanks) {
  if (!sharedOutputsEnabled() || setRanks.size() < 2 || transport.peerMemory() == nullptr) return false;
  if (hostOf.empty()) return true;
  const std::string& host = hostOf[static_cast<size_t>(transport.rank())];
  for (int r : setRanks) {
    if (r < 0 || static_cast<size_t>(r) >= hostOf.size() || hostOf[static_cast<size_t>(r)] != host) return false;
  }
  return true;
}

}  // namespace hvd::collectives
