// Response cache. After a name has been negotiated once with every member of
// its process set taking part, the coordinator gives its response a cache id that every rank
// records. From then on a rank whose request is identical (same kind, dtype, shape, factors, op,
// root, splits, group) sends only that id (bits in a vector), and the coordinator answers with
// ids; no names or shapes travel.
//
// Ids are assigned by the coordinator and never reused, so an id always means one
// (process set, name, parameters). Two views:
//  * CacheReplica: on every rank (rank 0 included), updated only by processing response lists,
//    in list order; used to decide hits and to expand id-only responses.
//  * CoordinatorCache: rank 0's authoritative copy with LRU and per-set capacity. An evicted entry
//    stays as a tombstone until every rank has processed the list announcing the eviction, so a
//    hit that crossed the eviction on the wire can still be resolved (and renegotiated).
// Engine thread only (whoever runs the engine: runtime.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/id_map.h"
#include "engine/message.h"

namespace hvd::engine {

struct CacheEntry {
  OpParams params;  // a hit implies the same sharedInPlace (the request's params equal these)
  TensorInfo tensor;  // cacheInsert false, cacheId = the entry's id

  static CacheEntry fromResponse(const Response& response, const TensorInfo& tensor);
  // Whether `request`, made by the member at `setIndex`, is identical to what was cached.
  bool matches(const Request& request, int setIndex) const;
  // The request the member at `setIndex` made (to renegotiate from a hit).
  Request requestFor(int setIndex, int globalRank) const;
};

// Key of a name within a process set, and a non-owning view of one for lookups that should not
// copy the name (the hash and equality are transparent).
struct NameKey {
  int32_t processSet = 0;
  std::string name;
  bool operator==(const NameKey& o) const { return processSet == o.processSet && name == o.name; }
};
struct NameKeyRef {
  int32_t processSet = 0;
  std::string_view name;
};
struct NameKeyHash {
  using is_transparent = void;
  size_t operator()(const NameKeyRef& k) const {
    return std::hash<std::string_view>()(k.name) * 31 + static_cast<size_t>(k.processSet);
  }
  size_t operator()(const NameKey& k) const { return (*this)(NameKeyRef{k.processSet, k.name}); }
};
struct NameKeyEq {
  using is_transparent = void;
  static NameKeyRef ref(const NameKey& k) { return NameKeyRef{k.processSet, k.name}; }
  static NameKeyRef ref(const NameKeyRef& k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    NameKeyRef x = ref(a), y = ref(b);
    return x.processSet == y.processSet && x.name == y.name;
  }
};

class CacheReplica {
 public:
  // The id of (processSet, name) if cached and identical to `request`, else kNoCacheId.
  uint32_t lookup(const Request& request, int setIndex) const;
  const CacheEntry* get(uint32_t id) const;
  void insert(uint32_t id, CacheEntry entry);
  void erase(uint32_t id);
  size_t size() const { return entries_.size(); }
  // Changes with every insert and erase: what was derived from the replica at one version (the
  // responses of a step's hits) holds as long as the version is the same.
  uint64_t version() const { return version_; }

 private:
  uint64_t version_ = 0;
  IdMap<CacheEntry> entries_;
  std::unordered_map<NameKey, uint32_t, NameKeyHash, NameKeyEq> byName_;
};

class CoordinatorCache {
 public:
  // What the coordinator reads for every cache hit, kept apart from the entries: consecutive ids
  // share cache lines (FlatIdMap), so a step's hits read a few contiguous lines even when the
  // step's compute has evicted the engine's state. Pointers last until the next insert or
  // forgetTombstones().
  struct Meta {
    uint64_t lastUse = 0;
    int32_t processSet = 0;
    bool live = false;
    bool grouped = false;  // a member of a group (its name and size are in the entry)
  };

  explicit CoordinatorCache(int64_t capacity) : capacity_(capacity) {}
  // Whether new entries are made: a capacity above 0 and not disabled by a knob (engine/knobs.h;
  // disabling makes no new entries and leaves evicting the existing ones to the caller).
  bool enabled() const { return capacity_ > 0 && !disabled_; }
  void setDisabled(bool disabled) { disabled_ = disabled; }

  // Live entry or tombstone; nullptr if unknown. `live` tells which.
  const CacheEntry* find(uint32_t id, bool* live) const;
  // The same for the per-hit fields only.
  const Meta* meta(uint32_t id) const { return metas_.find(id); }
  // Live id of (processSet, name), or kNoCacheId.
  uint32_t liveId(int32_t processSet, const std::string& name) const;
  void touch(uint32_t id);
  // Adds an entry and returns its id. Evicts the set's least recently used entry when the set is
  // at capacity (logging Horovod's warning once); evicted ids are appended to `evicted`.
  // An eviction costs O(log n) per entry used since it was last looked at (see SetState);
  // touch() stays a store.
  uint32_t insert(CacheEntry entry, uint64_t seq, std::vector<uint32_t>& evicted);
  // Turns a live entry into a tombstone (announced in list `seq`).
  void evict(uint32_t id, uint64_t seq);
  void evictProcessSet(int32_t processSet, uint64_t seq, std::vector<uint32_t>& evicted);
  // Drops tombstones every rank has heard about (all processed lists up to `seq`).
  void forgetTombstones(uint64_t seqSeenByAll);

 private:
  struct Slot {
    CacheEntry entry;
    uint64_t evictedAt = 0;  // tombstones: the list that announced the eviction
  };
  int64_t capacity_;
  bool disabled_ = false;
  uint32_t nextId_ = 0;
  uint64_t clock_ = 0;
  bool warned_ = false;
  IdMap<Slot> slots_;
  FlatIdMap<Meta> metas_;  // the same ids as slots_
  std::unordered_map<NameKey, uint32_t, NameKeyHash, NameKeyEq> byName_;  // live only
  // Per process set: the number of live entries, and a min-heap of (lastUse when queued, id)
  // holding every live id. A hit only stamps its Meta; the heap catches up when an eviction
  // looks: an id whose entry was used since it was queued goes back in with its new stamp, and
  // the first id found unchanged at the top is the least recently used (every other live entry
  // was queued at or after that stamp and used no earlier than it was queued). Ids evicted
  // otherwise are dropped when met, and the heap is rebuilt when they outnumber the live ones.
  struct SetState {
    int64_t live = 0;
    std::vector<std::pair<uint64_t, uint32_t>> byLastUse;  // min-heap on lastUse
  };
  uint32_t leastRecentlyUsed(SetState& set);
  std::unordered_map<int32_t, SetState> sets_;
  std::vector<uint32_t> tombstones_;
};

}  // namespace hvd::engine
