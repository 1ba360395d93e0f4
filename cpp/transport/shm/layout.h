// What lives in shared memory, and where. Every structure here is shared between processes: only
// trivially-copyable fields and lock-free atomics (address-free), no pointers.
//
// One segment per rank (the "owner"); every rank maps every segment. The owner's segment holds
// what the owner *receives* plus the owner's wake-up word:
//
//   [SegmentHeader                                  ] one page
//   [RingControl x 2*(size-1)                       ] data ring and mailbox ring per sender
//   [data ring bytes   x (size-1)  (ringBytes each) ] page aligned
//   [mailbox ring bytes x (size-1) (mailboxBytes each)]
//
// Sender s (s != owner) uses slot s < owner ? s : s - 1. Rings are single-producer (the sender)
// single-consumer (the owner) byte streams; positions count bytes ever written/read and never
// wrap, so "full" and "empty" need no extra flag.
//
// Waking: every thread of a rank that blocks sleeps on its own header's `bell` futex word after
// incrementing `sleepers`. Whoever changes something the rank may wait for (writes into its
// rings, frees space in a ring it writes to, arrives at a barrier, closes) issues a full fence,
// reads `sleepers`, and only if non-zero bumps `bell` and calls FUTEX_WAKE. The fast path has no
// system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hvd::shm {

constexpr size_t kLine = 128;  // two cache lines: keeps adjacent-line prefetch from false sharing
constexpr size_t kPage = 4096;
constexpr uint64_t kSegmentMagic = 0x3130736d68647668ULL;  // "hvdshm01"
constexpr uint64_t kSpaceMagic = 0x3130737068647668ULL;    // "hvdsps01"

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct SegmentHeader {
  // Written by the owner before publishing the segment; checked by every peer that maps it.
  alignas(kLine) std::atomic<uint64_t> magic;
  int32_t pid;
  int32_t rank;
  int32_t size;
  uint32_t reserved;
  uint64_t ringBytes;
  uint64_t mailboxBytes;
  uint64_t totalBytes;
  // Futex word the owner sleeps on (32 bits, as futex requires).
  alignas(kLine) std::atomic<uint32_t> bell;
  // Number of the owner's threads blocked, or about to block, on `bell`.
  std::atomic<uint32_t> sleepers;
  // 0 while open; kClosedClean after a normal close (waits that depend on the owner fail);
  // kClosedFailed after an abort or a failure (every peer's waits fail).
  std::atomic<uint32_t> closed;
  // When the owner failed because a data-plane wait timed out: 1 + the rank it was waiting for
  // (the one that did not answer); 0 otherwise. Written before `closed`, so that a peer that
  // sees the owner's failure blames that rank rather than the owner.
  std::atomic<uint32_t> timedOutOn;
};
constexpr uint32_t kClosedClean = 1;
constexpr uint32_t kClosedFailed = 2;
static_assert(sizeof(SegmentHeader) <= kPage);

struct RingControl {
  alignas(kLine) std::atomic<uint64_t> head;  // bytes ever written (by the sender only)
  alignas(kLine) std::atomic<uint64_t> tail;  // bytes ever read (by the owner only)
};

// Header of one SharedSpace buffer segment (one per member); the buffer follows at kPage.
struct SpaceHeader {
  alignas(kLine) std::atomic<uint64_t> magic;
  int32_t pid;
  int32_t rank;
  uint64_t capacity;
  // Barrier generation this member has reached (written by the member only).
  alignas(kLine) std::atomic<uint64_t> arrived;
  // SharedSpace::publish()'s progress value (written by the member only; zero in a new segment).
  alignas(kLine) std::atomic<uint64_t> published;
};
static_assert(sizeof(SpaceHeader) <= kPage);

inline size_t roundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// Offsets of everything in a rank's segment, derived from (size, ringBytes, mailboxBytes) alone
// so that every rank computes the same layout.
struct SegmentLayout {
  int size = 1;
  size_t ringBytes = 0;
  size_t mailboxBytes = 0;

  int slots() const { return size - 1; }
  static int slotOf(int owner, int sender) { return sender < owner ? sender : sender - 1; }
  size_t controlOffset(int slot, bool mailbox) const {
    return kPage + (static_cast<size_t>(slot) * 2 + (mailbox ? 1 : 0)) * sizeof(RingControl);
  }
  size_t dataBase() const { return roundUp(kPage + static_cast<size_t>(slots()) * 2 * sizeof(RingControl), kPage); }
  size_t ringOffset(int slot) const { return dataBase() + static_cast<size_t>(slot) * ringBytes; }
  size_t mailboxOffset(int slot) const {
    return dataBase() + static_cast<size_t>(slots()) * ringBytes + static_cast<size_t>(slot) * mailboxBytes;
  }
  size_t totalBytes() const { return dataBase() + static_cast<size_t>(slots()) * (ringBytes + mailboxBytes); }
};

}  // namespace hvd::shm
