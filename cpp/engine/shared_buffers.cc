#include "engine/shared_buffers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "common/logging.h"
#include "common/params.h"
#include "transport/shm/segment.h"

namespace hvd::engine {
namespace {

const Param<bool> kSharedInPlace("HOROVOD_SHARED_INPLACE", true,
                                 "Allreduce in place inside buffers from hvd::allocateShared / _core.shared_buffer "
                                 "(DistributedOptimizer's gradient buckets) reduces directly in the ranks' shared "
                                 "buffers on one host (no staging copies), and large allgathers write straight into "
                                 "every rank's output. 0 = always take the staged paths.");

struct Registry {
  std::shared_mutex mu;
  std::map<uintptr_t, SharedBufferInfo> byBase;  // base address -> info
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> nextId{1};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: buffers may outlive static teardown
  return *r;
}

size_t pageBytes() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

std::shared_ptr<void> allocateSharedBuffer(size_t bytes) {
  const size_t page = pageBytes();
  const size_t size = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  shm::Segment segment;
  try {
    segment = shm::Segment::create(size, /*named=*/false, "");
  } catch (const std::exception& e) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      HVD_LOG(Warning) << "Shared buffers fall back to ordinary memory (" << e.what()
                       << "); allreduce on them takes the staged path.";
    });
    void* p = std::aligned_alloc(page, size);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, size);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  auto owned = std::make_shared<shm::Segment>(std::move(segment));
  SharedBufferInfo info;
  info.id = registry().nextId.fetch_add(1);
  info.bytes = size;
  info.base = owned->data();
  // Segment keeps the fd open until reset(); its descriptor is "fd:<pid>:<fd>".
  std::string desc = owned->descriptor();
  info.fd = std::atoi(desc.c_str() + desc.rfind(':') + 1);
  {
    Registry& r = registry();
    std::unique_lock<std::shared_mutex> lock(r.mu);
    r.byBase[reinterpret_cast<uintptr_t>(info.base)] = info;
    r.count.fetch_add(1);
  }
  void* base = info.base;
  return std::shared_ptr<void>(base, [owned](void* p) {
    Registry& r = registry();
    {
      std::unique_lock<std::shared_mutex> lock(r.mu);
      r.byBase.erase(reinterpret_cast<uintptr_t>(p));
      r.count.fetch_sub(1);
    }
    // Peers cache their mappings of this segment (shared_inplace.cc); without this the memory
    // would stay resident in them until they evict it.
    owned->discardPages();
    owned->reset();
  });
}

bool findSharedBuffer(const void* data, size_t bytes, SharedBufferInfo* info) {
  Registry& r = registry();
  if (bytes == 0 || data == nullptr || r.count.load(std::memory_order_acquire) == 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  std::shared_lock<std::shared_mutex> lock(r.mu);
  auto it = r.byBase.upper_bound(begin);
  if (it == r.byBase.begin()) return false;
  --it;
  const SharedBufferInfo& found = it->second;
  if (begin < it->first || begin - it->first > found.bytes || bytes > found.bytes - (begin - it->first)) return false;
  if (info != nullptr) *info = found;
  return true;
}

bool sharedPathsEnabled() {
  static const bool enabled = kSharedInPlace.get();
  return enabled;
}

bool sharedInPlaceUsable(const Transport& transport, const std::vector<std::string>& hostOf,
                         const std::vector<int>& setRanks) {
  if (!sharedPathsEnabled() || setRanks.size() < 2) return false;
  if (transport.name().find("shm") == std::string::npos) return false;
  if (hostOf.empty()) return true;
  const std::string& host = hostOf[static_cast<size_t>(transport.rank())];
  for (int r : setRanks) {
    if (r < 0 || static_cast<size_t>(r) >= hostOf.size() || hostOf[static_cast<size_t>(r)] != host) return false;
  }
  return true;
}

}  // namespace hvd::engine
