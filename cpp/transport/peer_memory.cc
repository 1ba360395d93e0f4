#include "transport/peer_memory.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "common/check.h"
#include "common/logging.h"

namespace hvd {
namespace {

std::atomic<SharedBufferAllocator*> registered{nullptr};

size_t pageBytes() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

void registerSharedBufferAllocator(SharedBufferAllocator* allocator) {
  registered.store(allocator, std::memory_order_release);
}

std::shared_ptr<void> allocateSharedBuffer(size_t bytes) {
  const size_t page = pageBytes();
  const size_t size = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  std::string why = "no shared-memory backend in this build";
  if (SharedBufferAllocator* allocator = registered.load(std::memory_order_acquire)) {
    try {
      return allocator->allocate(size);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  static std::once_flag warned;
  std::call_once(warned, [&] {
    HVD_LOG(Warning) << "Shared buffers fall back to ordinary memory (" << why
                     << "); allreduce on them takes the staged path.";
  });
  void* p = std::aligned_alloc(page, size);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, size);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

bool findSharedBuffer(const void* data, size_t bytes, SharedBufferInfo* info) {
  SharedBufferAllocator* allocator = registered.load(std::memory_order_acquire);
  return allocator != nullptr && allocator->find(data, bytes, info);
}

}  // namespace hvd
