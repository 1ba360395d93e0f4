#include "engine/output_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#include "transport/peer_memory.h"

namespace hvd::engine {
namespace {

constexpr size_t kPage = 4096;

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// The capacity a request of `bytes` maps: whole huge pages from 2 MiB up, whole pages below.
size_t capacityFor(size_t bytes) {
  return bytes >= OutputPool::kHugePage ? roundUp(bytes, OutputPool::kHugePage) : roundUp(bytes, kPage);
}

}  // namespace

const Param<int64_t>& outputPoolBytesParam() {
  static const Param<int64_t> param(
      "HOROVOD_OUTPUT_POOL_BYTES", int64_t(16) << 20,
      "Bytes of released allgather/alltoall outputs the engine keeps mapped for reuse (fresh "
      "pages cost a page fault each on first touch); the oldest are returned to the system "
      "beyond this. 0 keeps none.");
  return param;
}

struct OutputPool::Release {
  std::shared_ptr<OutputPool> pool;
  Block block;
  void operator()(void*) { pool->release(std::move(block)); }
};

OutputPool::~OutputPool() { trim(); }

std::shared_ptr<void> OutputPool::acquire(size_t bytes, bool shared) {
  if (bytes < kMinPooledBytes) {
    void* p = std::aligned_alloc(64, roundUp(std::max<size_t>(bytes, 1), 64));
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  const size_t want = capacityFor(bytes);
  shared = shared && want <= budget_;
  Block block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Smallest cached block that fits without wasting more than the request itself.
    auto best = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      if (it->capacity >= want && it->capacity <= 2 * want && (it->shared != nullptr) == shared &&
          (best == cached_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != cached_.end()) {
      block = std::move(*best);
      cachedBytes_ -= block.capacity;
      cached_.erase(best);
    }
  }
  if (block.base == nullptr) {
    block = mapBlock(want, shared);
    std::lock_guard<std::mutex> lock(mutex_);
    ++blocksMapped_;
  }
  // On failure the shared_ptr constructor itself calls the deleter (back into the pool).
  void* base = block.base;
  return std::shared_ptr<void>(base, Release{shared_from_this(), std::move(block)});
}

void OutputPool::release(Block block) {
  std::vector<Block> evicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (block.capacity <= budget_ && !closed_) {
      cachedBytes_ += block.capacity;
      cached_.push_back(std::move(block));
      while (cachedBytes_ > budget_) {
        evicted.push_back(std::move(cached_.front()));
        cachedBytes_ -= cached_.front().capacity;
        cached_.erase(cached_.begin());
      }
    } else {
      evicted.push_back(std::move(block));
    }
  }
  for (Block& b : evicted) unmapBlock(b);
}

size_t OutputPool::cachedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cachedBytes_;
}

size_t OutputPool::blocksMapped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocksMapped_;
}

void OutputPool::trim() {
  std::vector<Block> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(cached_);
    cachedBytes_ = 0;
  }
  for (Block& b : all) unmapBlock(b);
}

void OutputPool::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  trim();
}

OutputPool::Block OutputPool::mapBlock(size_t capacity, bool shared) {
  if (shared) {
    Block block;
    block.shared = allocateSharedBuffer(capacity);
    block.base = block.shared.get();
    block.capacity = capacity;
#ifdef MADV_POPULATE_WRITE
    // One call instead of a page fault per page on first touch (best effort: kernels < 5.14).
    madvise(block.base, capacity, MADV_POPULATE_WRITE);
#endif
    return block;
  }
  const bool huge = capacity >= kHugePage;
  // Huge pages need 2 MiB alignment: map a huge page more and cut the excess off both ends.
  const size_t length = huge ? capacity + kHugePage : capacity;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<uint8_t*>(p);
  if (huge) {
    auto* aligned = reinterpret_cast<uint8_t*>(roundUp(reinterpret_cast<uintptr_t>(base), kHugePage));
    if (aligned > base) munmap(base, static_cast<size_t>(aligned - base));
    const size_t tail = static_cast<size_t>(base + length - (aligned + capacity));
    if (tail > 0) munmap(aligned + capacity, tail);
    base = aligned;
#ifdef MADV_HUGEPAGE
    madvise(base, capacity, MADV_HUGEPAGE);  // advisory: without THP the block still works
#endif
  }
  return Block{base, capacity, nullptr};
}

void OutputPool::unmapBlock(Block& block) {
  if (block.shared != nullptr) {
    block.shared.reset();
  } else {
    munmap(block.base, block.capacity);
  }
}

OwnedTensor allocateTensor(OutputPool& pool, DataType dtype, std::vector<int64_t> shape, bool shared) {
  OwnedTensor t;
  t.view.dtype = dtype;
  t.view.shape = std::move(shape);
  t.storage = pool.acquire(t.view.bytes(), shared);
  t.view.data = t.storage.get();
  return t;
}

}  // namespace hvd::engine
