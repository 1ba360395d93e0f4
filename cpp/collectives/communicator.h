// Communicator: a process set's view of the job's Transport. Algorithms address peers by *set
// rank* (index in the sorted member list); the communicator maps them to global ranks.
//
// Used only by the thread running the engine (engine/runtime.h), or one test thread per rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"
#include "transport/transport.h"

namespace hvd {

namespace collectives {
class MemberBuffers;
}

class Communicator {
 public:
  // `members`: ascending global ranks; must contain transport.rank().
  Communicator(Transport& transport, std::vector<int> members, std::chrono::milliseconds timeout);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }  // set rank
  int size() const { return static_cast<int>(members_.size()); }
  int globalRank(int setRank) const { return members_[setRank]; }
  const std::vector<int>& members() const { return members_; }
  Transport& transport() { return transport_; }
  // Deadline for one blocking step started now (algorithms take one per step, so the timeout
  // bounds progress, not the length of a large collective).
  Deadline deadline() const { return Deadline::after(timeout_); }

  void send(int peer, const void* data, size_t bytes, Deadline d) { transport_.send(members_[peer], data, bytes, d); }
  void recv(int peer, void* data, size_t bytes, Deadline d) { transport_.recv(members_[peer], data, bytes, d); }
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                Deadline d) {
    transport_.sendRecv(members_[to], sendData, sendBytes, members_[from], recvData, recvBytes, d);
  }
  // Shared memory over all members when they are on one host and the transport offers it;
  // created on first call (collectively), cached afterwards.
  SharedSpace* sharedSpace(Deadline d);

  // ---- Placement, for the hierarchical algorithms (collectives/hierarchical.cc) --------------
  // Members grouped by host (Transport::hostOf(); a transport that does not tell puts every
  // member on one host). Hosts are numbered in order of their lowest set rank; equal on every
  // member, so algorithm choices may depend on it.
  struct HostLayout {
    int count = 1;                          // hosts with members of this set
    std::vector<int> hostOfRank;            // set rank -> host index
    std::vector<std::vector<int>> members;  // host index -> its set ranks, ascending
    int host = 0;                           // this rank's host
    int localRank = 0;                      // this rank's index in members[host]
    bool uniform = true;                    // every host has the same number of members
    int maxLocalSize = 1;                   // members on the fullest host
    int localSize() const { return static_cast<int>(members[host].size()); }
  };
  const HostLayout& hosts() const { return hosts_; }
  // Shared memory among the members on this rank's host (sharedSpace() when the set is on one
  // host; nullptr when this rank is alone on its host or the transport offers none). Collective
  // among those members on first call, cached.
  SharedSpace* hostSharedSpace(Deadline d);
  // A communicator over the given set ranks (ascending set ranks, including this rank), built on
  // first request without communication and cached; same transport and timeout. Used for the
  // cross-host stages of hierarchical algorithms.
  Communicator& subset(const std::vector<int>& setRanks);
  // Half-buffer bytes the hierarchical algorithms may use on every host, agreed by all members
  // on first use (collectives/hierarchical.cc); 0 = they cannot run. Empty until agreed.
  std::optional<size_t>& hierarchicalBytes() { return hierarchicalBytes_; }

  // ---- State kept for the algorithms (collectives/*.cc), persistent across calls ------------
  // Scratch buffer `slot` (0..kScratchSlots-1) of at least `bytes`, 64-byte aligned; grows, never
  // shrinks, so steady-state collectives allocate nothing. Contents are not preserved on growth.
  static constexpr int kScratchSlots = 2;
  void* scratch(int slot, size_t bytes);
  // Double-buffering phase of sharedSpace(): every shared-memory chunk takes the next phase
  // (SharedSpace::nextPhase, shared with other communicators over the same space).
  uint64_t nextSharedPhase() { return shared_ != nullptr ? shared_->nextPhase() : sharedPhase_++; }
  // What the algorithms over the members' shared outputs keep between calls
  // (collectives/member_buffers.h): which buffers the members mapped last. Created on first use.
  collectives::MemberBuffers& memberBuffers();
  // Allreduce algorithm override by name ("" = choose by size); defaults to
  // HOROVOD_ALLREDUCE_ALGO. Must be equal on every member.
  const std::string& allreduceAlgorithm() const { return allreduceAlgorithm_; }
  void setAllreduceAlgorithm(std::string name) { allreduceAlgorithm_ = std::move(name); }
  // Run-time tuning (engine/knobs.h): the size limit that replaces every table row's own size
  // rule (0 = the rows' own limits), and whether the hierarchical allreduce and allgather may be
  // chosen. Must be equal on every member at every collective (the engine changes them between
  // response lists, on every rank at the same list).
  size_t allreduceCrossover() const { return allreduceCrossover_; }
  void setAllreduceCrossover(size_t bytes) { allreduceCrossover_ = bytes; }
  bool hierarchicalAllowed() const { return hierarchicalAllowed_; }
  void setHierarchicalAllowed(bool allowed) { hierarchicalAllowed_ = allowed; }

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
  size_t allreduceCrossover_ = 0;
  bool hierarchicalAllowed_ = true;
  HostLayout hosts_;
  bool hostSharedQueried_ = false;
  SharedSpace* hostShared_ = nullptr;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> subsets_;
  std::optional<size_t> hierarchicalBytes_;
  std::unique_ptr<collectives::MemberBuffers> memberBuffers_;
};

}  // namespace hvd
