#include "collectives/communicator.h"

#include <algorithm>
#include <cstdlib>

#include "collectives/algorithms.h"

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
}

SharedSpace* Communicator::sharedSpace(Deadline d) {
  if (!sharedQueried_) {
    // Collective on first use: every member reaches this point in the same collective.
    shared_ = size() > 1 ? transport_.sharedSpace(members_, d) : nullptr;
    sharedQueried_ = true;
  }
  return shared_;
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
