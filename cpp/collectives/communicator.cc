#include "collectives/communicator.h"

#include <algorithm>
#include <cstdlib>

#include "collectives/algorithms.h"
#include "collectives/member_buffers.h"

namespace hvd {

Communicator::Communicator(Transport& transport, std::vector<int> members, std::chrono::milliseconds timeout)
    : transport_(transport), members_(std::move(members)), timeout_(timeout) {
  HVD_CHECK_AS(InvalidArgument, std::is_sorted(members_.begin(), members_.end()) &&
                                    std::adjacent_find(members_.begin(), members_.end()) == members_.end())
      << "communicator members must be ascending and distinct";
  auto it = std::find(members_.begin(), members_.end(), transport_.rank());
  HVD_CHECK_AS(InvalidArgument, it != members_.end())
      << "communicator members do not include this rank (" << transport_.rank() << ")";
  rank_ = static_cast<int>(it - members_.begin());
  allreduceAlgorithm_ = collectives::allreduceAlgorithmParam().get();
  collectives::checkAllreduceAlgorithmName(allreduceAlgorithm_);

  // Hosts in order of their lowest member.
  const std::vector<std::string> hostOf = transport_.hostOf();
  std::vector<std::string> names;
  hosts_.hostOfRank.assign(members_.size(), 0);
  for (size_t i = 0; i < members_.size(); ++i) {
    int g = members_[i];
    const std::string name = g < static_cast<int>(hostOf.size()) ? hostOf[g] : std::string();
    auto at = std::find(names.begin(), names.end(), name);
    if (at == names.end()) {
      names.push_back(name);
      hosts_.members.emplace_back();
      at = names.end() - 1;
    }
    int h = static_cast<int>(at - names.begin());
    hosts_.hostOfRank[i] = h;
    hosts_.members[h].push_back(static_cast<int>(i));
  }
  hosts_.count = static_cast<int>(names.size());
  hosts_.host = hosts_.hostOfRank[rank_];
  const auto& mine = hosts_.members[hosts_.host];
  hosts_.localRank = static_cast<int>(std::find(mine.begin(), mine.end(), rank_) - mine.begin());
  hosts_.maxLocalSize = 0;
  for (const auto& group : hosts_.members) {
    hosts_.uniform = hosts_.uniform && group.size() == mine.size();
    hosts_.maxLocalSize = std::max(hosts_.maxLocalSize, static_cast<int>(group.size()));
  }
}

Communicator::~Communicator() = default;

SharedSpace* Communicator::sharedSpace(Deadline d) {
  if (!sharedQueried_) {
    // Collective on first use: every member reaches this point in the same collective.
    shared_ = size() > 1 ? transport_.sharedSpace(members_, d) : nullptr;
    sharedQueried_ = true;
  }
  return shared_;
}

SharedSpace* Communicator::hostSharedSpace(Deadline d) {
  if (hosts_.count == 1) return sharedSpace(d);
  if (!hostSharedQueried_) {
    // Collective among this host's members, which reach this point in the same collective.
    if (hosts_.localSize() > 1) {
      std::vector<int> ranks;
      for (int setRank : hosts_.members[hosts_.host]) ranks.push_back(members_[setRank]);
      hostShared_ = transport_.sharedSpace(ranks, d);
    }
    hostSharedQueried_ = true;
  }
  return hostShared_;
}

Communicator& Communicator::subset(const std::vector<int>& setRanks) {
  auto it = subsets_.find(setRanks);
  if (it != subsets_.end()) return *it->second;
  std::vector<int> globals;
  for (int r : setRanks) {
    HVD_CHECK(r >= 0 && r < size()) << "subset: set rank " << r << " of " << size();
    globals.push_back(members_[r]);
  }
  auto sub = std::make_unique<Communicator>(transport_, globals, timeout_);
  Communicator& result = *sub;
  subsets_.emplace(setRanks, std::move(sub));
  return result;
}

collectives::MemberBuffers& Communicator::memberBuffers() {
  if (!memberBuffers_) memberBuffers_ = std::make_unique<collectives::MemberBuffers>();
  return *memberBuffers_;
}

void Communicator::AlignedFree::operator()(void* p) const { std::free(p); }

void* Communicator::scratch(int slot, size_t bytes) {
  HVD_CHECK(slot >= 0 && slot < kScratchSlots) << "scratch slot " << slot;
  if (bytes > scratchBytes_[slot] || !scratch_[slot]) {
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    scratch_[slot].reset();
    void* p = std::aligned_alloc(64, rounded);
    HVD_CHECK(p != nullptr) << "cannot allocate " << rounded << " bytes of scratch";
    scratch_[slot].reset(p);
    scratchBytes_[slot] = rounded;
  }
  return scratch_[slot].get();
}

}  // namespace hvd
