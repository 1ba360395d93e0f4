#include "engine/response_cache.h"

#include <algorithm>
#include <functional>

#include "common/logging.h"

namespace hvd::engine {
namespace {

bool perRankShape(Kind k) { return k == Kind::kAllgather || k == Kind::kAlltoall; }

}  // namespace

CacheEntry CacheEntry::fromResponse(const Response& response, const TensorInfo& tensor) {
  CacheEntry e;
  e.params = response.params;
  e.tensor = tensor.data();
  e.tensor.cacheId = tensor.cacheId;
  e.tensor.cacheInsert = false;
  e.tensor.ref = nullptr;
  return e;
}

bool CacheEntry::matches(const Request& r, int setIndex) const {
  if (r.params != params || r.group != tensor.group || r.groupSize != tensor.groupSize || r.name != tensor.name) {
    return false;
  }
  if (!perRankShape(params.kind)) return r.shape == tensor.shape;
  if (setIndex < 0 || static_cast<size_t>(setIndex) >= tensor.firstDims.size()) return false;
  if (r.shape.size() != tensor.shape.size() || r.shape.empty()) return false;
  if (r.shape[0] != tensor.firstDims[setIndex]) return false;
  if (!std::equal(r.shape.begin() + 1, r.shape.end(), tensor.shape.begin() + 1)) return false;
  if (params.kind == Kind::kAlltoall) {
    size_t n = tensor.firstDims.size();
    if (r.splits.size() != n) return false;
    return std::equal(r.splits.begin(), r.splits.end(), tensor.splits.begin() + static_cast<ptrdiff_t>(setIndex * n));
  }
  return true;
}

Request CacheEntry::requestFor(int setIndex, int globalRank) const {
  Request r;
  r.params = params;
  r.name = tensor.name;
  r.shape = tensor.shape;
  r.group = tensor.group;
  r.groupSize = tensor.groupSize;
  r.rank = globalRank;
  if (perRankShape(params.kind) && setIndex >= 0 && static_cast<size_t>(setIndex) < tensor.firstDims.size()) {
    r.shape[0] = tensor.firstDims[setIndex];
    if (params.kind == Kind::kAlltoall) {
      size_t n = tensor.firstDims.size();
      auto row = tensor.splits.begin() + static_cast<ptrdiff_t>(setIndex * n);
      r.splits.assign(row, row + static_cast<ptrdiff_t>(n));
    }
  }
  return r;
}

// ---- CacheReplica ---------------------------------------------------------------------------

uint32_t CacheReplica::lookup(const Request& request, int setIndex) const {
  if (byName_.empty()) return kNoCacheId;
  auto it = byName_.find(NameKeyRef{request.params.processSet, request.name});
  if (it == byName_.end()) return kNoCacheId;
  const CacheEntry* e = entries_.find(it->second);
  if (e == nullptr || !e->matches(request, setIndex)) return kNoCacheId;
  return it->second;
}

const CacheEntry* CacheReplica::get(uint32_t id) const { return entries_.find(id); }

void CacheReplica::insert(uint32_t id, CacheEntry entry) {
  entry.tensor.cacheId = id;
  ++version_;
  byName_[NameKey{entry.params.processSet, entry.tensor.name}] = id;
  entries_.assign(id, std::move(entry));
}

void CacheReplica::erase(uint32_t id) {
  const CacheEntry* entry = entries_.find(id);
  if (entry == nullptr) return;
  ++version_;
  auto name = byName_.find(NameKeyRef{entry->params.processSet, entry->tensor.name});
  if (name != byName_.end() && name->second == id) byName_.erase(name);
  entries_.erase(id);
}

// ---- CoordinatorCache -----------------------------------------------------------------------

const CacheEntry* CoordinatorCache::find(uint32_t id, bool* live) const {
  const Slot* slot = slots_.find(id);
  if (slot == nullptr) return nullptr;
  if (live) *live = metas_.find(id)->live;
  return &slot->entry;
}

uint32_t CoordinatorCache::liveId(int32_t processSet, const std::string& name) const {
  if (byName_.empty()) return kNoCacheId;
  auto it = byName_.find(NameKeyRef{processSet, name});
  return it == byName_.end() ? kNoCacheId : it->second;
}

void CoordinatorCache::touch(uint32_t id) {
  if (Meta* meta = metas_.find(id)) meta->lastUse = ++clock_;
}

namespace {
constexpr auto kOlderOnTop = std::greater<std::pair<uint64_t, uint32_t>>();
}

uint32_t CoordinatorCache::leastRecentlyUsed(SetState& set) {
  auto& heap = set.byLastUse;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), kOlderOnTop);
    auto [queuedAt, id] = heap.back();
    heap.pop_back();
    const Meta* meta = metas_.find(id);
    if (meta == nullptr || !meta->live) continue;  // evicted since it was queued
    if (meta->lastUse == queuedAt) return id;     // unused since: the least recently used
    heap.emplace_back(meta->lastUse, id);         // used since: back in with its new stamp
    std::push_heap(heap.begin(), heap.end(), kOlderOnTop);
  }
  return kNoCacheId;
}

uint32_t CoordinatorCache::insert(CacheEntry entry, uint64_t seq, std::vector<uint32_t>& evicted) {
  const int32_t ps = entry.params.processSet;
  SetState& set = sets_[ps];
  if (set.live >= capacity_) {
    uint32_t victim = leastRecentlyUsed(set);
    if (victim != kNoCacheId) {
      if (!warned_) {
        warned_ = true;
        HVD_LOG(Warning) << "A response has been evicted from cache which may indicate reduced performance. Better "
                            "performance may be obtained by disabling caching (HOROVOD_CACHE_CAPACITY=0) or "
                            "increasing the cache capacity (HOROVOD_CACHE_CAPACITY>"
                         << capacity_ << ").";
      }
      evict(victim, seq);
      evicted.push_back(victim);
    }
  }
  uint32_t id = nextId_++;
  entry.tensor.cacheId = id;
  byName_[NameKey{ps, entry.tensor.name}] = id;
  metas_.assign(id, Meta{++clock_, ps, true, !entry.tensor.group.empty() && entry.tensor.groupSize > 1});
  Slot slot;
  slot.entry = std::move(entry);
  slots_.assign(id, std::move(slot));
  set.live++;
  auto& heap = set.byLastUse;
  heap.emplace_back(clock_, id);
  std::push_heap(heap.begin(), heap.end(), kOlderOnTop);
  if (heap.size() > 2 * static_cast<size_t>(set.live) + 64) {
    // Mostly ids evicted by renegotiation: keep the live ones.
    heap.clear();
    metas_.forEach([&](uint32_t liveId, const Meta& meta) {
      if (meta.live && meta.processSet == ps) heap.emplace_back(meta.lastUse, liveId);
    });
    std::make_heap(heap.begin(), heap.end(), kOlderOnTop);
  }
  return id;
}

void CoordinatorCache::evict(uint32_t id, uint64_t seq) {
  Slot* found = slots_.find(id);
  Meta* meta = metas_.find(id);
  if (found == nullptr || !meta->live) return;
  Slot& slot = *found;
  meta->live = false;
  slot.evictedAt = seq;
  sets_[slot.entry.params.processSet].live--;
  auto name = byName_.find(NameKeyRef{slot.entry.params.processSet, slot.entry.tensor.name});
  if (name != byName_.end() && name->second == id) byName_.erase(name);
  tombstones_.push_back(id);
}

void CoordinatorCache::evictProcessSet(int32_t processSet, uint64_t seq, std::vector<uint32_t>& evicted) {
  std::vector<uint32_t> ids;
  metas_.forEach([&](uint32_t id, const Meta& meta) {
    if (meta.live && meta.processSet == processSet) ids.push_back(id);
  });
  std::sort(ids.begin(), ids.end());
  for (uint32_t id : ids) {
    evict(id, seq);
    evicted.push_back(id);
  }
}

void CoordinatorCache::forgetTombstones(uint64_t seqSeenByAll) {
  if (tombstones_.empty()) return;
  auto keep = tombstones_.begin();
  for (uint32_t id : tombstones_) {
    const Slot* slot = slots_.find(id);
    if (slot != nullptr && slot->evictedAt <= seqSeenByAll) {
      slots_.erase(id);
      metas_.erase(id);
    } else {
      *keep++ = id;
    }
  }
  tombstones_.erase(keep, tombstones_.end());
}

}  // namespace hvd::engine
