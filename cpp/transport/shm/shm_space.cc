#include "transport/shm/shm_space.h"

#include <algorithm>
#include <sstream>

#include "common/check.h"
#include "transport/shm/layout.h"
#include "transport/shm/shm_transport.h"

namespace hvd::shm {

ShmSpace::ShmSpace(ShmTransport& transport, std::vector<int> members, std::vector<Segment> buffers, size_t capacity)
    : transport_(transport), members_(std::move(members)), buffers_(std::move(buffers)), capacity_(capacity) {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == transport_.rank()) index_ = static_cast<int>(i);
    auto* header = reinterpret_cast<SpaceHeader*>(buffers_[i].data());
    HVD_CHECK_EQ(header->magic.load(std::memory_order_acquire), kSpaceMagic)
        << "shared space buffer of rank " << members_[i] << " is not initialised";
    HVD_CHECK_EQ(header->rank, members_[i]) << "shared space buffer belongs to another rank";
    HVD_CHECK_EQ(header->capacity, capacity_) << "shared space capacity differs (HOROVOD_SHM_SPACE_BYTES)";
    headers_.push_back(header);
  }
  HVD_CHECK_GE(index_, 0) << "this rank is not a member of the shared space";
}

void* ShmSpace::buffer(int memberIndex) {
  HVD_CHECK(memberIndex >= 0 && memberIndex < static_cast<int>(members_.size()))
      << "member index " << memberIndex << " out of range for " << members_.size() << " members";
  return buffers_[memberIndex].data() + kPage;
}

void ShmSpace::barrier(Deadline deadline) {
  transport_.waiter_->throwIfFailed();
  const uint64_t generation = ++generation_;
  const size_t n = members_.size();
  // Release our writes to every buffer together with our arrival.
  headers_[index_]->arrived.store(generation, std::memory_order_seq_cst);
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) != index_) Waiter::notify(transport_.peers_[members_[i]].header);
  }
  size_t next = 0;  // members before `next` are known to have arrived
  auto ready = [&] {
    for (; next < n; ++next) {
      if (headers_[next]->arrived.load(std::memory_order_acquire) < generation) return false;
    }
    return true;
  };
  transport_.waitOrBlame(
      ready, deadline,
      [&] {
        std::ostringstream out;
        out << "shm barrier timed out on rank " << transport_.rank() << " (members: ";
        for (size_t i = 0; i < n; ++i) out << (i ? ", " : "") << "rank " << members_[i];
        out << "); not arrived: ";
        bool first = true;
        for (size_t i = 0; i < n; ++i) {
          if (headers_[i]->arrived.load(std::memory_order_acquire) < generation) {
            out << (first ? "" : ", ") << "rank " << members_[i];
            first = false;
          }
        }
        return out.str();
      },
      [&](int peer) { return std::find(members_.begin(), members_.end(), peer) != members_.end(); },
      [&] {  // the first member that has not arrived
        for (size_t i = 0; i < n; ++i) {
          if (headers_[i]->arrived.load(std::memory_order_acquire) < generation) return members_[i];
        }
        return -1;
      });
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void ShmSpace::publish(uint64_t value) {
  // seq_cst, like barrier(): orders the store before notify()'s check for sleepers.
  headers_[index_]->published.store(value, std::memory_order_seq_cst);
  for (size_t i = 0; i < members_.size(); ++i) {
    if (static_cast<int>(i) != index_) Waiter::notify(transport_.peers_[members_[i]].header);
  }
}

void ShmSpace::awaitPublished(int memberIndex, uint64_t value, Deadline deadline) {
  HVD_CHECK(memberIndex >= 0 && memberIndex < static_cast<int>(members_.size()))
      << "member index " << memberIndex << " out of range for " << members_.size() << " members";
  std::atomic<uint64_t>& published = headers_[memberIndex]->published;
  if (published.load(std::memory_order_acquire) >= value) return;
  transport_.waiter_->throwIfFailed();
  const int peer = members_[memberIndex];
  transport_.waitOrTimeout([&] { return published.load(std::memory_order_acquire) >= value; }, deadline,
                           [&] {
                             std::ostringstream out;
                             out << "shm shared space: rank " << transport_.rank() << " timed out waiting for rank "
                                 << peer << " to publish " << value << " (it published "
                                 << published.load(std::memory_order_acquire) << ")";
                             return out.str();
                           },
                           [&](int rank) { return rank == peer; }, peer);
}

}  // namespace hvd::shm
