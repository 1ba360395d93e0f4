// Communicator: a process set's view of the job's Transport. Algorithms address peers by *set
// rank* (index in the sorted member list); the communicator maps them to global ranks.
//
// Used only from the engine's background thread (or one test thread per rank).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "transport/transport.h"

namespace hvd {

class Communicator {
 public:
  // `members`: ascending global ranks; must contain transport.rank().
  Communicator(Transport& transport, std::vector<int> members, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }  // set rank
  int size() const { return static_cast<int>(members_.size()); }
  int globalRank(int setRank) const { return members_[setRank]; }
  const std::vector<int>& members() const { return members_; }
  Transport& transport() { return transport_; }
  // Deadline for one blocking step started now (algorithms take one per step, so the timeout
  // bounds progress, not the length of a large collective).
  Deadline deadline() const { return Deadline::after(timeout_); }

  void send(int peer, const void* data, size_t bytes, Deadline d) {
    transport_.send(members_[peer], data, bytes, d);
  }
  void recv(int peer, void* data, size_t bytes, Deadline d) {
    transport_.recv(members_[peer], data, bytes, d);
  }
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData,
                size_t recvBytes, Deadline d) {
    transport_.sendRecv(members_[to], sendData, sendBytes, members_[from], recvData, recvBytes, d);
  }
  // Shared memory over all members when they are on one host and the transport offers it;
  // created on first call (collectively), cached afterwards.
  SharedSpace* sharedSpace(Deadline d);

  // ---- State kept for the algorithms (collectives/*.cc), persistent across calls ------------
  // Scratch buffer `slot` (0..kScratchSlots-1) of at least `bytes`, 64-byte aligned; grows, never
  // shrinks, so steady-state collectives allocate nothing. Contents are not preserved on growth.
  static constexpr int kScratchSlots = 2;
  void* scratch(int slot, size_t bytes);
  // Double-buffering phase of the shared space: every shared-memory chunk takes the next phase;
  // all members advance it identically because they run the same collectives in the same order.
  uint64_t nextSharedPhase() { return sharedPhase_++; }
  // Allreduce algorithm override by name ("" = choose by size); defaults to
  // HOROVOD_ALLREDUCE_ALGO. Must be equal on every member.
  const std::string& allreduceAlgorithm() const { return allreduceAlgorithm_; }
  void setAllreduceAlgorithm(std::string name) { allreduceAlgorithm_ = std::move(name); }

 private:
  Transport& transport_;
  std::vector<int> members_;
  int rank_ = -1;
  std::chrono::milliseconds timeout_;
  bool sharedQueried_ = false;
  SharedSpace* shared_ = nullptr;
  struct AlignedFree {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, AlignedFree> scratch_[kScratchSlots];
  size_t scratchBytes_[kScratchSlots] = {};
  uint64_t sharedPhase_ = 0;
  std::string allreduceAlgorithm_;
};

}  // namespace hvd
