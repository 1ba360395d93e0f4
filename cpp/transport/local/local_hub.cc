#include "transport/local/local_hub.h"

#include <cstdlib>

#include "common/check.h"

namespace hvd {
namespace {

// Process-wide registry of hubs by jobId (the one singleton this transport needs: ranks that
// are threads find each other through it). Entries expire with their last transport.
std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, std::weak_ptr<LocalHub>>& registry() {
  static std::map<std::string, std::weak_ptr<LocalHub>> hubs;
  return hubs;
}

void freeAligned(void* p) { std::free(p); }

}  // namespace

std::shared_ptr<LocalHub> LocalHub::attach(const std::string& jobId, int rank, int size) {
  HVD_CHECK_AS(InvalidArgument, size >= 1) << "local transport: size " << size;
  HVD_CHECK_AS(InvalidArgument, rank >= 0 && rank < size) << "local transport: rank " << rank << " of " << size;
  std::lock_guard<std::mutex> lock(registryMutex());
  auto& hubs = registry();
  for (auto it = hubs.begin(); it != hubs.end();) {
    it = it->second.expired() ? hubs.erase(it) : std::next(it);
  }
  std::shared_ptr<LocalHub> hub = hubs[jobId].lock();
  if (!hub) {
    hub = std::make_shared<LocalHub>(size);
    hubs[jobId] = hub;
  }
  HVD_CHECK_AS(InvalidArgument, hub->size() == size) << "local transport: job '" << jobId << "' has size "
                                                     << hub->size() << ", rank " << rank << " asked for " << size;
  std::lock_guard<std::mutex> hubLock(hub->mutex);
  LocalRankState& state = hub->rank(rank);
  HVD_CHECK_AS(InvalidArgument, !state.present && !state.departed.load())
      << "local transport: rank " << rank << " of job '" << jobId << "' attached twice";
  state.present = true;
  hub->attached++;
  return hub;
}

LocalHub::LocalHub(int size) : size_(size), streams_(static_cast<size_t>(size) * size) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<LocalRankState>());
}

int LocalHub::failedRank(int self) const {
  for (int r = 0; r < size_; ++r) {
    if (r != self && ranks_[r]->aborted.load(std::memory_order_acquire)) return r;
  }
  return -1;
}

void LocalHub::notifyAll() {
  std::vector<std::shared_ptr<LocalSharedGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& state : ranks_) state->cv.notify_all();
    for (auto& entry : groups_) groups.push_back(entry.second);
  }
  for (auto& group : groups) {
    std::lock_guard<std::mutex> lock(group->mutex);
    group->cv.notify_all();
  }
}

std::shared_ptr<LocalSharedGroup> LocalHub::sharedGroup(const std::vector<int>& members, size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = groups_[members];
  if (!slot) {
    auto group = std::make_shared<LocalSharedGroup>();
    group->members = members;
    group->capacity = capacity;
    group->published = std::make_unique<std::atomic<uint64_t>[]>(members.size());
    size_t rounded = (capacity + 63) / 64 * 64;
    for (size_t i = 0; i < members.size(); ++i) {
      void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
      HVD_CHECK(p != nullptr) << "local transport: cannot allocate " << rounded << " shared bytes";
      group->buffers.emplace_back(static_cast<uint8_t*>(p), &freeAligned);
    }
    slot = std::move(group);
  }
  return slot;
}

}  // namespace hvd
