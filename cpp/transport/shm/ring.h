// Ring: a process-local view of one single-producer single-consumer byte ring in shared memory.
// One process writes (the sender), one reads (the owner of the segment); each side uses its own
// Ring object and only its own half of the methods. Not thread-safe: one thread per side at a
// time (the transport serialises access).
//
// Positions are monotonically increasing byte counts; the capacity is a power of two. They live
// in memory the peer writes: a position it corrupted never makes a copy leave the ring (the
// bytes in flight count as at most the capacity), it only garbles the stream. Each side
// caches the other side's position and re-reads the shared one only when the cache says "full"
// (writer) or "empty" (reader), so a steady stream touches the other side's cache line rarely.
#pragma once

#include <algorithm>
#include <cstring>

#include "transport/shm/layout.h"

namespace hvd::shm {

class Ring {
 public:
  Ring() = default;
  Ring(RingControl* control, uint8_t* data, size_t capacity)
      : control_(control), data_(data), capacity_(capacity), mask_(capacity - 1) {
    head_ = control_->head.load(std::memory_order_acquire);
    tail_ = control_->tail.load(std::memory_order_acquire);
  }

  size_t capacity() const { return capacity_; }

  // ---- Writer side ----
  // Copies up to min(bytes, maxChunk) bytes that fit now and publishes them; returns how many.
  size_t write(const void* src, size_t bytes, size_t maxChunk) {
    size_t space = capacity_ - inFlight();
    if (space < bytes && space < maxChunk) {
      tail_ = control_->tail.load(std::memory_order_acquire);
      space = capacity_ - inFlight();
    }
    size_t n = std::min({bytes, space, maxChunk});
    if (n == 0) return 0;
    size_t at = static_cast<size_t>(head_) & mask_;
    size_t first = std::min(n, capacity_ - at);
    std::memcpy(data_ + at, src, first);
    if (first < n) std::memcpy(data_, static_cast<const uint8_t*>(src) + first, n - first);
    head_ += n;
    control_->head.store(head_, std::memory_order_release);
    return n;
  }
  // True if the writer could write at least one byte now (re-reads the reader's position).
  bool writable() {
    if (head_ - tail_ < capacity_) return true;
    tail_ = control_->tail.load(std::memory_order_acquire);
    return head_ - tail_ < capacity_;
  }

  // ---- Reader side ----
  // Copies up to `bytes` available bytes out and releases their space; returns how many.
  size_t read(void* dst, size_t bytes) {
    size_t avail = inFlight();
    if (avail < bytes) {
      head_ = control_->head.load(std::memory_order_acquire);
      avail = inFlight();
    }
    size_t n = std::min(bytes, avail);
    if (n == 0) return 0;
    size_t at = static_cast<size_t>(tail_) & mask_;
    size_t first = std::min(n, capacity_ - at);
    std::memcpy(dst, data_ + at, first);
    if (first < n) std::memcpy(static_cast<uint8_t*>(dst) + first, data_, n - first);
    tail_ += n;
    control_->tail.store(tail_, std::memory_order_release);
    return n;
  }
  // True if at least one byte can be read now (re-reads the writer's position).
  bool readable() {
    if (head_ != tail_) return true;
    head_ = control_->head.load(std::memory_order_acquire);
    return head_ != tail_;
  }

 private:
  // Bytes written and not yet read, as this side sees them, at most the capacity.
  size_t inFlight() const {
    uint64_t n = head_ - tail_;
    return n > capacity_ ? capacity_ : static_cast<size_t>(n);
  }

  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  uint64_t head_ = 0;  // writer: own position; reader: cached writer position
  uint64_t tail_ = 0;  // reader: own position; writer: cached reader position
};

}  // namespace hvd::shm
