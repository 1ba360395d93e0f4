// ShmSpace: the SharedSpace of a group of ranks of one ShmTransport (Transport::sharedSpace).
//
// Every member owns one buffer segment: a SpaceHeader page, then `capacity` bytes (page aligned).
// All members map all buffers, so algorithms can read and reduce each other's slices in place.
// Created collectively by ShmTransport::sharedSpace (the first call for a member list) and owned
// by the transport: valid until the transport is destroyed.
//
// barrier(): each member publishes the generation it reached in its own header (release) and
// waits until every member's is at least as far (acquire); all writes to any buffer before the
// barrier are visible to every member after it. No read-modify-write on shared lines, so members
// never contend; waiting spins briefly, then sleeps like every other wait of the transport and
// watches for lost peers. publish()/awaitPublished() work the same way on a second word of the
// member's header.
//
// Used by one thread at a time per member (the thread running the engine).
#pragma once

#include <vector>

#include "transport/shm/segment.h"
#include "transport/transport.h"

namespace hvd::shm {

class ShmTransport;
struct SpaceHeader;

class ShmSpace final : public SharedSpace {
 public:
  // `buffers[i]` is member i's segment (this rank's own included), each kPage + capacity bytes.
  ShmSpace(ShmTransport& transport, std::vector<int> members, std::vector<Segment> buffers, size_t capacity);

  const std::vector<int>& members() const override { return members_; }
  int memberIndex() const override { return index_; }
  size_t capacity() const override { return capacity_; }
  void* buffer(int memberIndex) override;
  void barrier(Deadline deadline) override;
  void publish(uint64_t value) override;
  void awaitPublished(int memberIndex, uint64_t value, Deadline deadline) override;

 private:
  ShmTransport& transport_;
  std::vector<int> members_;
  int index_ = -1;
  std::vector<Segment> buffers_;
  std::vector<SpaceHeader*> headers_;
  size_t capacity_;
  uint64_t generation_ = 0;
};

}  // namespace hvd::shm
