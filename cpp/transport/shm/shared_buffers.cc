#include "transport/shm/shared_buffers.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "transport/shm/segment.h"

namespace hvd::shm {
namespace {

class ShmSharedBuffers final : public SharedBufferAllocator {
 public:
  std::shared_ptr<void> allocate(size_t bytes) override {
    // Throws hvd::Error when memfd is not available: the caller falls back to ordinary memory.
    auto owned = std::make_shared<Segment>(Segment::create(bytes, /*named=*/false, ""));
    SharedBufferInfo info;
    info.owner = static_cast<int64_t>(::getpid());
    info.id = nextId_.fetch_add(1);
    info.bytes = bytes;
    info.base = owned->data();
    // Segment keeps the fd open until reset(); its descriptor is "fd:<pid>:<fd>".
    const std::string desc = owned->descriptor();
    info.handle = std::atoll(desc.c_str() + desc.rfind(':') + 1);
    {
      std::unique_lock<std::shared_mutex> lock(mu_);
      byBase_[reinterpret_cast<uintptr_t>(info.base)] = info;
      count_.fetch_add(1);
    }
    void* base = info.base;
    return std::shared_ptr<void>(base, [this, owned](void* p) {
      {
        std::unique_lock<std::shared_mutex> lock(mu_);
        byBase_.erase(reinterpret_cast<uintptr_t>(p));
        count_.fetch_sub(1);
      }
      // Peers cache their mappings of this segment (peer_mappings.h); without this the memory
      // would stay resident in them until they evict it.
      owned->discardPages();
      owned->reset();
    });
  }

  bool find(const void* data, size_t bytes, SharedBufferInfo* info) const override {
    if (bytes == 0 || data == nullptr || count_.load(std::memory_order_acquire) == 0) return false;
    const auto begin = reinterpret_cast<uintptr_t>(data);
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = byBase_.upper_bound(begin);
    if (it == byBase_.begin()) return false;
    --it;
    const SharedBufferInfo& found = it->second;
    if (begin - it->first > found.bytes || bytes > found.bytes - (begin - it->first)) return false;
    if (info != nullptr) *info = found;
    return true;
  }

 private:
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, SharedBufferInfo> byBase_;  // base address -> info
  std::atomic<size_t> count_{0};
  std::atomic<uint64_t> nextId_{1};
};

struct Registrar {
  Registrar() { registerSharedBufferAllocator(&sharedBuffers()); }
} registrar;

}  // namespace

SharedBufferAllocator& sharedBuffers() {
  static auto* allocator = new ShmSharedBuffers();  // never destroyed
  return *allocator;
}

}  // namespace hvd::shm
