#include "engine/coordinator.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/negotiation.h"

namespace hvd::engine {
namespace {

// Entries the hit log may hold beyond twice the pending hits before it is compacted.
constexpr size_t kHitLogSlack = 4096;

bool cacheable(Kind k) {
  return k == Kind::kAllreduce || k == Kind::kAdasum || k == Kind::kAllgather || k == Kind::kAlltoall;
}

bool sameEntry(const CacheEntry& a, const CacheEntry& b) {
  return a.params == b.params && a.tensor.name == b.tensor.name && a.tensor.shape == b.tensor.shape &&
         a.tensor.firstDims == b.tensor.firstDims && a.tensor.splits == b.tensor.splits &&
         a.tensor.group == b.tensor.group && a.tensor.groupSize == b.tensor.groupSize;
}

}  // namespace

Coordinator::Coordinator(Options options)
    : options_(options),
      observers_(options.observers != nullptr ? options.observers : &ObserverHub::none()),
      cache_(options.cacheCapacity),
      lastSeqOf_(static_cast<size_t>(options.size), 0),
      joined_(static_cast<size_t>(options.size), 0) {
  std::vector<int> all(static_cast<size_t>(options.size));
  for (int i = 0; i < options.size; ++i) all[i] = i;
  sets_[0] = std::move(all);
}

void Coordinator::addProcessSet(int32_t id, std::vector<int> ranks) {
  sets_[id] = std::move(ranks);
  nextSetId_ = std::max(nextSetId_, id + 1);
}

const std::vector<int>* Coordinator::setRanks(int32_t processSet) const {
  auto it = sets_.find(processSet);
  return it == sets_.end() ? nullptr : &it->second;
}

int Coordinator::required(int32_t processSet, Kind kind) const {
  if (kind == Kind::kAddProcessSet || kind == Kind::kRemoveProcessSet) return options_.size;
  const auto* ranks = setRanks(processSet);
  int n = ranks ? static_cast<int>(ranks->size()) : 0;
  return processSet == 0 ? n - joinedCount_ : n;
}

void Coordinator::ingest(int rank, RequestList& list) {
  if (rank >= 0 && rank < options_.size) lastSeqOf_[rank] = std::max(lastSeqOf_[rank], list.lastSeq);
  if (list.shutdown && !shutdown_) {
    shutdown_ = true;
    shutdownBy_ = rank;
  }
  for (uint32_t id : list.hits) addHit(rank, id);
  for (auto& request : list.requests) {
    request.rank = rank;
    addRequest(std::move(request));
  }
}

void Coordinator::addHit(int rank, uint32_t id) {
  const CoordinatorCache::Meta* meta = cache_.meta(id);
  if (meta == nullptr) {
    HVD_LOG(Error) << "Coordinator: rank " << rank << " reported unknown cache id " << id << "; ignored";
    return;
  }
  const auto* ranks = setRanks(meta->processSet);
  if (ranks == nullptr) return;  // the set was removed; the rank fails the op itself
  auto negotiating = [&] {
    const CacheEntry* entry = cache_.find(id, nullptr);
    return pending_.find(NameKeyRef{entry->params.processSet, entry->tensor.name}) != pending_.end();
  };
  if (meta->live && (pending_.empty() || !negotiating())) {
    const int32_t processSet = meta->processSet;
    const bool grouped = meta->grouped;
    HitCount& hit = hitCounts_[id];
    uint32_t& count = hit.count;
    ++count;
    ++pendingHits_;
    hitLog_.emplace_back(id, rank);
    if (hitLog_.size() > 2 * pendingHits_ + kHitLogSlack) compactHitLog();
    // required() without a second set lookup (cached kinds are never add/remove-set).
    const int need = static_cast<int>(ranks->size()) - (processSet == 0 ? joinedCount_ : 0);
    if (static_cast<int>(count) >= need) {
      pendingHits_ -= count;
      count = 0;
      ++hit.round;
      if (pendingHits_ == 0) hitLog_.clear();
      if (!grouped) {
        readyHits_.push_back(id);
      } else {
        ReadyItem item;
        item.hitId = id;
        const CacheEntry* entry = cache_.find(id, nullptr);
        markReady(std::move(item), entry->tensor.group, entry->tensor.groupSize, processSet);
      }
    }
    return;
  }
  // Evicted meanwhile, or other ranks sent full requests for this name: negotiate normally.
  addRequest(cache_.find(id, nullptr)->requestFor(setIndexOf(*ranks, rank), rank));
}

void Coordinator::compactHitLog() {
  // An id's pending hits are its last `count` entries: keep those, newest first, then restore
  // the order.
  FlatIdMap<uint32_t> quota;
  std::vector<std::pair<uint32_t, int32_t>> kept;
  kept.reserve(pendingHits_);
  for (auto it = hitLog_.rbegin(); it != hitLog_.rend(); ++it) {
    const HitCount* hit = hitCounts_.find(it->first);
    if (hit == nullptr || hit->count == 0) continue;
    uint32_t* left = quota.find(it->first);
    if (left == nullptr) left = &quota.assign(it->first, hit->count);
    if (*left == 0) continue;
    --*left;
    kept.push_back(*it);
  }
  std::reverse(kept.begin(), kept.end());
  hitLog_.swap(kept);
}

std::vector<int32_t> Coordinator::takeHits(uint32_t id) {
  std::vector<int32_t> ranks;
  HitCount* hit = hitCounts_.find(id);
  if (hit == nullptr || hit->count == 0) return ranks;
  // This round's hits on `id` are its last `count` entries in the log (earlier rounds' come first).
  for (auto it = hitLog_.rbegin(); it != hitLog_.rend() && ranks.size() < hit->count; ++it) {
    if (it->first == id) ranks.push_back(it->second);
  }
  std::reverse(ranks.begin(), ranks.end());
  pendingHits_ -= hit->count;
  hit->count = 0;
  ++hit->round;
  if (pendingHits_ == 0) hitLog_.clear();
  return ranks;
}

void Coordinator::addRequest(Request request) {
  if (request.params.kind == Kind::kJoin) {
    join(request.rank);
    return;
  }
  const auto* ranks = setRanks(request.params.processSet);
  if (ranks == nullptr) return;  // removed set; the requester fails it when it learns
  if (!owed_.empty() && answerOwed(request)) return;
  auto [it, inserted] = pending_.try_emplace(NameKey{request.params.processSet, request.name});
  const NameKey& key = it->first;
  Pending& pending = it->second;
  const size_t arrived = pending.requests.size();
  if (inserted) openPending(request, *ranks, pending);
  pending.requests.push_back(std::move(request));
  if (observers_->wantsAny(eventBit(EngineEventKind::kNegotiateStart) | eventBit(EngineEventKind::kNegotiateRank)))
      [[unlikely]] {
    notifyArrivals(key, pending, arrived);
  }
  if (failedEarly(key, pending)) return;
  maybeReady(key, pending);
}

void Coordinator::openPending(const Request& request, const std::vector<int>& ranks, Pending& pending) {
  pending.serial = ++nextSerial_;
  // Ranks that already sent a hit for this name: turn their hits into requests (they arrived
  // first, so they come first).
  uint32_t id = cache_.liveId(request.params.processSet, request.name);
  if (id == kNoCacheId) return;
  const CacheEntry* entry = cache_.find(id, nullptr);
  for (int r : takeHits(id)) pending.requests.push_back(entry->requestFor(setIndexOf(ranks, r), r));
}

void Coordinator::notifyArrivals(const NameKey& key, const Pending& pending, size_t arrived) const {
  // Ranks whose hits were turned into requests (openPending) arrived before the new one.
  const auto& requests = pending.requests;
  if (arrived == 0) notify(EngineEventKind::kNegotiateStart, key, requests.front().params.kind, requests.front().rank);
  for (size_t i = arrived; i < requests.size(); ++i) {
    notify(EngineEventKind::kNegotiateRank, key, requests[i].params.kind, requests[i].rank);
  }
}

bool Coordinator::failedEarly(const NameKey& key, const Pending& pending) {
  // A request that contradicts the first one is a mismatch whatever the remaining members send:
  // answer it now instead of waiting for members that may never come (they may be blocked in a
  // different operation of their own, waiting for us).
  const auto& requests = pending.requests;
  if (requests.size() < 2 || failures_.find(key) != failures_.end() ||
      !conflicting(requests.front(), requests.back()) ||
      static_cast<int>(requests.size()) >= required(key.processSet, requests.front().params.kind)) {
    return false;
  }
  std::string message = mismatchMessage(requests, contextFor(key.processSet));
  if (message.empty()) return false;
  failEarly(key, pending, std::move(message));
  return true;
}

NegotiationContext Coordinator::contextFor(int32_t processSet) const {
  NegotiationContext ctx;
  ctx.setRanks = setRanks(processSet);
  ctx.joinedCount = processSet == 0 ? joinedCount_ : 0;
  ctx.fusionThreshold = options_.fusion.threshold;
  return ctx;
}

void Coordinator::failEarly(const NameKey& key, const Pending& pending, std::string message) {
  std::vector<int> submitted;
  for (const auto& q : pending.requests) submitted.push_back(q.rank);
  Owed owed;
  owed.message = message;
  owed.ranks = missingRanks(key.processSet, pending.requests.front().params.kind, submitted);
  if (!owed.ranks.empty()) owed_[key] = std::move(owed);
  failures_[key] = std::move(message);
  ReadyItem item;
  item.key = key;
  ready_.push_back(std::move(item));  // not held for a group: its members may never come
}

bool Coordinator::answerOwed(const Request& request) {
  auto it = owed_.find(NameKeyRef{request.params.processSet, request.name});
  if (it == owed_.end()) return false;
  auto& ranks = it->second.ranks;
  auto owedRank = std::find(ranks.begin(), ranks.end(), request.rank);
  if (owedRank == ranks.end()) {
    // A rank that had its answer uses the name again: a new round, negotiated normally.
    owed_.erase(it);
    return false;
  }
  ranks.erase(owedRank);
  NameKey key = it->first;
  std::string message = ranks.empty() ? std::move(it->second.message) : it->second.message;
  if (ranks.empty()) owed_.erase(it);
  if (failures_.count(key) != 0 || pending_.count(key) != 0) return false;  // answered with those
  Pending& pending = pending_[key];
  pending.serial = ++nextSerial_;
  pending.requests.push_back(request);
  failures_[key] = std::move(message);
  ReadyItem item;
  item.key = key;
  ready_.push_back(std::move(item));
  return true;
}

void Coordinator::failPending(int32_t processSet, const std::string& name, std::string message) {
  NameKey key{processSet, name};
  const auto* ranks = setRanks(processSet);
  if (ranks == nullptr || failures_.count(key) != 0) return;
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    // Only cache hits so far: they become requests, answered like negotiated ones.
    uint32_t id = cache_.liveId(processSet, name);
    if (id == kNoCacheId) return;
    std::vector<int32_t> hitRanks = takeHits(id);
    if (hitRanks.empty()) return;
    const CacheEntry* entry = cache_.find(id, nullptr);
    it = pending_.try_emplace(key).first;
    it->second.serial = ++nextSerial_;
    for (int r : hitRanks) it->second.requests.push_back(entry->requestFor(setIndexOf(*ranks, r), r));
  }
  failures_[key] = std::move(message);
  ReadyItem item;
  item.key = key;
  ready_.push_back(std::move(item));
}

void Coordinator::notify(EngineEventKind kind, const NameKey& key, Kind op, int rank) const {
  if (!observers_->wants(kind)) return;
  EngineEvent e;
  e.kind = kind;
  e.processSet = key.processSet;
  e.op = op;
  e.tensors = TensorNames::one(key.name);
  e.rank = rank;
  observers_->publish(e);
}

void Coordinator::maybeReady(const NameKey& key, Pending& pending) {
  const Request& first = pending.requests.front();
  if (static_cast<int>(pending.requests.size()) != required(key.processSet, first.params.kind)) return;
  if (observers_->wants(EngineEventKind::kNegotiateEnd)) [[unlikely]] {
    notify(EngineEventKind::kNegotiateEnd, key, first.params.kind, -1);
  }
  ReadyItem item;
  item.key = key;
  markReady(std::move(item), first.group, first.groupSize, key.processSet);
}

void Coordinator::markReady(ReadyItem item, const std::string& group, int32_t groupSize, int32_t processSet) {
  if (group.empty() || groupSize <= 1) {
    ready_.push_back(std::move(item));
    return;
  }
  // Members of a group become ready together (they were enqueued atomically on every rank).
  NameKey groupKey{processSet, group};
  GroupHold& hold = groups_[groupKey];
  hold.items.push_back(std::move(item));
  if (static_cast<int32_t>(hold.items.size()) >= groupSize) {
    for (auto& i : hold.items) ready_.push_back(std::move(i));
    groups_.erase(groupKey);
  }
}

void Coordinator::join(int rank) {
  if (rank < 0 || rank >= options_.size || joined_[rank]) return;
  joined_[rank] = 1;
  joinedCount_++;
  lastJoined_ = rank;
  if (joinedCount_ == options_.size) {
    joinDone_ = true;
    return;
  }
  recheckAfterJoin();
}

void Coordinator::recheckAfterJoin() {
  // Fewer ranks are needed now for global-set names that were waiting.
  std::vector<NameKey> keys;
  for (auto& [key, pending] : pending_) {
    if (key.processSet == 0) keys.push_back(key);
  }
  for (const auto& key : keys) {
    auto it = pending_.find(key);
    if (it == pending_.end()) continue;
    bool alreadyReady = std::any_of(ready_.begin(), ready_.end(),
                                    [&](const ReadyItem& r) { return r.hitId == kNoCacheId && r.key == key; });
    if (!alreadyReady &&
        static_cast<int>(it->second.requests.size()) >= required(0, it->second.requests[0].params.kind)) {
      notify(EngineEventKind::kNegotiateEnd, key, it->second.requests[0].params.kind, -1);
      ReadyItem item;
      item.key = key;
      markReady(std::move(item), it->second.requests[0].group, it->second.requests[0].groupSize, 0);
    }
  }
  std::vector<uint32_t> ids;
  hitCounts_.forEach([&](uint32_t id, const HitCount& hit) {
    const uint32_t count = hit.count;
    if (count == 0) return;
    const CacheEntry* entry = cache_.find(id, nullptr);
    if (entry != nullptr && entry->params.processSet == 0 &&
        static_cast<int>(count) >= required(0, entry->params.kind)) {
      ids.push_back(id);
    }
  });
  std::sort(ids.begin(), ids.end());
  for (uint32_t id : ids) {
    takeHits(id);
    const CacheEntry* entry = cache_.find(id, nullptr);
    ReadyItem item;
    item.hitId = id;
    markReady(std::move(item), entry->tensor.group, entry->tensor.groupSize, 0);
  }
}

Response Coordinator::fullFromCache(uint32_t id, const CacheEntry& entry) {
  // A joined rank has no buffer: send the full form with the shared in-place flag off.
  Response r;
  r.params = entry.params;
  r.params.sharedInPlace = false;
  TensorInfo t = entry.tensor;
  t.cacheId = id;
  r.tensors.push_back(std::move(t));
  return r;
}

Response Coordinator::negotiate(const NameKey& key) {
  auto it = pending_.find(key);
  std::vector<Request> requests = std::move(it->second.requests);
  pending_.erase(it);
  const NegotiationContext ctx = contextFor(key.processSet);
  Response r = constructResponse(requests, ctx);
  if (!failures_.empty()) applyRecordedFailure(key, r);
  const bool allTookPart = ctx.setRanks != nullptr && requests.size() == ctx.setRanks->size() && ctx.joinedCount == 0;
  // Shared in place only when every member asked for it and none has joined.
  r.params.sharedInPlace =
      r.params.kind == Kind::kAllreduce && allTookPart &&
      std::all_of(requests.begin(), requests.end(), [](const Request& q) { return q.params.sharedInPlace; });
  if (r.params.kind == Kind::kAddProcessSet) {
    addProcessSet(r);
  } else if (r.params.kind == Kind::kRemoveProcessSet) {
    removeProcessSet(r);
  } else {
    const bool recurs = std::none_of(requests.begin(), requests.end(), [](const Request& q) { return q.oneOffName; });
    updateCache(key, r, allTookPart && recurs);
  }
  return r;
}

void Coordinator::applyRecordedFailure(const NameKey& key, Response& r) {
  auto failed = failures_.find(key);
  if (failed == failures_.end()) return;
  r.params.kind = Kind::kError;
  r.error = std::move(failed->second);
  failures_.erase(failed);
}

void Coordinator::addProcessSet(Response& r) {
  std::vector<int> newRanks(r.setRanks.begin(), r.setRanks.end());
  for (const auto& [id, existing] : sets_) {
    if (existing == newRanks) {
      r.params.kind = Kind::kError;
      r.error = "Attempted to add a duplicate process set: " +
                shapeString(std::vector<int64_t>(newRanks.begin(), newRanks.end()));
      return;
    }
  }
  r.setId = nextSetId_++;
  sets_[r.setId] = std::move(newRanks);
}

void Coordinator::removeProcessSet(Response& r) {
  if (r.setId == 0 || sets_.find(r.setId) == sets_.end()) {
    r.params.kind = Kind::kError;
    r.error = "Process set " + std::to_string(r.setId) + " does not exist or is the global set.";
    return;
  }
  removedSets_.push_back(r.setId);
}

void Coordinator::updateCache(const NameKey& key, Response& r, bool mayInsert) {
  // A changed or failed name loses its entry on every rank; a name negotiated with every member
  // taking part gets one, unless a member said it will not recur (`mayInsert` false).
  const uint32_t old = cache_.liveId(key.processSet, key.name);
  if (r.params.kind != Kind::kError && cacheable(r.params.kind) && cache_.enabled() && mayInsert) {
    CacheEntry entry = CacheEntry::fromResponse(r, r.tensors[0]);
    const CacheEntry* existing = old != kNoCacheId ? cache_.find(old, nullptr) : nullptr;
    if (existing != nullptr && sameEntry(*existing, entry)) {
      cache_.touch(old);
      r.tensors[0].cacheId = old;
    } else {
      if (old != kNoCacheId) {
        cache_.evict(old, seq_);
        evicted_.push_back(old);
      }
      uint32_t id = cache_.insert(std::move(entry), seq_, evicted_);
      r.tensors[0].cacheId = id;
      r.tensors[0].cacheInsert = true;
    }
  } else if (old != kNoCacheId) {
    const CacheEntry* existing = cache_.find(old, nullptr);
    if (r.params.kind == Kind::kError || existing == nullptr ||
        !sameEntry(*existing, CacheEntry::fromResponse(r, r.tensors[0]))) {
      cache_.evict(old, seq_);
      evicted_.push_back(old);
    }
  }
}

void Coordinator::takeReady(std::vector<uint32_t>& hits, std::vector<Response>& singles) {
  // Hits in this batch are the most recently used: protect them from eviction by inserts below.
  for (uint32_t id : readyHits_) cache_.touch(id);
  for (const auto& item : ready_) {
    if (item.hitId != kNoCacheId) cache_.touch(item.hitId);
  }
  hits.reserve(readyHits_.size() + ready_.size());
  auto addHit = [&](uint32_t id) {
    const CacheEntry* entry = joinedCount_ > 0 ? cache_.find(id, nullptr) : nullptr;
    if (entry != nullptr && entry->params.sharedInPlace && entry->params.processSet == 0) {
      singles.push_back(fullFromCache(id, *entry));
    } else {
      hits.push_back(id);  // every rank derives these responses from its replica
    }
  };
  for (uint32_t id : readyHits_) addHit(id);
  readyHits_.clear();
  std::vector<ReadyItem>& ready = building_;  // empty: cleared below, while its items are cached
  ready.swap(ready_);  // ready_ takes building_'s old capacity: neither reallocates next step
  for (const auto& item : ready) {
    if (item.hitId != kNoCacheId) {
      addHit(item.hitId);
    } else if (pending_.count(item.key) != 0) {
      singles.push_back(negotiate(item.key));
    }
  }
  ready.clear();
  // Ids come in arrival order, mostly ascending already (ids are handed out in step order).
  if (!std::is_sorted(hits.begin(), hits.end())) std::sort(hits.begin(), hits.end());
  hits.erase(std::unique(hits.begin(), hits.end()), hits.end());
}

void Coordinator::renegotiateHitsOfEvicted() {
  // Hits waiting on an id evicted in this batch: those ranks' requests must not be lost, so they
  // go the negotiation route (ready ones surface in the next build()).
  std::vector<uint32_t> dead;
  hitCounts_.forEach([&](uint32_t id, const HitCount&) {
    const CoordinatorCache::Meta* meta = cache_.meta(id);
    if (meta == nullptr || !meta->live) dead.push_back(id);
  });
  std::sort(dead.begin(), dead.end());
  for (uint32_t id : dead) {
    std::vector<int32_t> hitRanks = takeHits(id);
    hitCounts_.erase(id);
    const CacheEntry* entry = cache_.find(id, nullptr);
    const auto* ranks = entry ? setRanks(entry->params.processSet) : nullptr;
    if (ranks == nullptr) continue;
    for (int r : hitRanks) addRequest(entry->requestFor(setIndexOf(*ranks, r), r));
  }
}

ResponseList Coordinator::build() {
  ResponseList out;
  if (!hasWork() && !shutdown_) return out;
  // Tombstones every rank has heard of go now (not at the end: responses of the previous list
  // may have pointed into them until it was processed).
  uint64_t seenByAll = seq_;
  for (int r = 1; r < options_.size; ++r) seenByAll = std::min(seenByAll, lastSeqOf_[r]);
  cache_.forgetTombstones(seenByAll);
  out.seq = ++seq_;
  if (pendingKnobs_.has_value()) [[unlikely]] {
    // Before anything is fused or cached for this list: it runs with the new knobs everywhere.
    applyPendingKnobs();
    out.knobs = std::move(pendingKnobs_);
    pendingKnobs_.reset();
  }
  std::vector<Response> singles;
  takeReady(out.hits, singles);
  forgetRemovedSets();
  if (!evicted_.empty()) renegotiateHitsOfEvicted();
  out.items = fuseResponses(std::move(singles), options_.fusion);
  if (joinDone_) out.items.push_back(takeJoinResponse());
  // Last in the list: earlier items may still refer to these ids.
  if (!evicted_.empty()) out.items.push_back(takeEvictResponse());
  out.shutdown = shutdown_;
  out.shutdownBy = shutdownBy_;
  return out;
}

void Coordinator::applyPendingKnobs() {
  options_.fusion.threshold = pendingKnobs_->fusionThreshold;
  if (cache_.enabled() && !pendingKnobs_->cacheEnabled) {
    // Announced at the end of this list, after the hits it carries; hits still pending on these
    // ids are renegotiated in this build().
    for (const auto& [id, ranks] : sets_) cache_.evictProcessSet(id, seq_, evicted_);
  }
  cache_.setDisabled(!pendingKnobs_->cacheEnabled);
}

void Coordinator::forgetRemovedSets() {
  // Process sets removed in this batch: forget their state here; every rank fails its own
  // pending operations of the set when it processes the removal.
  for (int32_t id : removedSets_) {
    sets_.erase(id);
    cache_.evictProcessSet(id, seq_, evicted_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      it = it->first.processSet == id ? pending_.erase(it) : std::next(it);
    }
    for (auto it = groups_.begin(); it != groups_.end();) {
      it = it->first.processSet == id ? groups_.erase(it) : std::next(it);
    }
  }
  removedSets_.clear();
}

Response Coordinator::takeJoinResponse() {
  Response join;
  join.params.kind = Kind::kJoin;
  join.params.processSet = 0;
  join.lastJoined = lastJoined_;
  joinDone_ = false;
  std::fill(joined_.begin(), joined_.end(), 0);
  joinedCount_ = 0;
  lastJoined_ = -1;
  return join;
}

Response Coordinator::takeEvictResponse() {
  Response evict;
  evict.params.kind = Kind::kEvict;
  for (uint32_t id : evicted_) {
    TensorInfo t;
    t.cacheId = id;
    evict.tensors.push_back(std::move(t));
  }
  evicted_.clear();
  return evict;
}

std::vector<int> Coordinator::missingRanks(int32_t processSet, Kind kind, const std::vector<int>& submitted) const {
  std::vector<int> missing;
  const bool everyone = kind == Kind::kAddProcessSet || kind == Kind::kRemoveProcessSet;
  const auto* ranks = setRanks(everyone ? 0 : processSet);
  if (ranks == nullptr) return missing;
  for (int r : *ranks) {
    // Joined ranks are not waited for in the global set (they take part with zeros).
    if (!everyone && processSet == 0 && joined_[static_cast<size_t>(r)]) continue;
    if (std::find(submitted.begin(), submitted.end(), r) == submitted.end()) missing.push_back(r);
  }
  return missing;
}

void Coordinator::pendingTensors(std::vector<PendingTensor>& out) const {
  for (const auto& [key, pending] : pending_) {
    if (pending.requests.empty()) continue;
    PendingTensor t;
    t.processSet = key.processSet;
    t.name = key.name;
    t.op = pending.requests.front().params.kind;
    t.instance = pending.serial;
    for (const auto& q : pending.requests) t.submitted.push_back(q.rank);
    std::sort(t.submitted.begin(), t.submitted.end());
    t.missing = missingRanks(key.processSet, t.op, t.submitted);
    out.push_back(std::move(t));
  }
  if (pendingHits_ == 0) return;
  // An id's pending hits are its last `count` entries in the log (see takeHits).
  FlatIdMap<uint32_t> left;
  std::vector<std::pair<uint32_t, std::vector<int>>> byId;
  for (auto it = hitLog_.rbegin(); it != hitLog_.rend(); ++it) {
    const HitCount* hit = hitCounts_.find(it->first);
    if (hit == nullptr || hit->count == 0) continue;
    uint32_t* quota = left.find(it->first);
    if (quota == nullptr) {
      quota = &left.assign(it->first, hit->count);
      byId.emplace_back(it->first, std::vector<int>{});
    }
    if (*quota == 0) continue;
    --*quota;
    auto found = std::find_if(byId.begin(), byId.end(), [&](const auto& p) { return p.first == it->first; });
    found->second.push_back(it->second);
  }
  for (auto& [id, ranks] : byId) {
    const CacheEntry* entry = cache_.find(id, nullptr);
    if (entry == nullptr) continue;
    PendingTensor t;
    t.processSet = entry->params.processSet;
    t.name = entry->tensor.name;
    t.op = entry->params.kind;
    t.cached = true;
    t.instance = hitCounts_.find(id)->round;
    t.submitted = std::move(ranks);
    std::sort(t.submitted.begin(), t.submitted.end());
    t.missing = missingRanks(entry->params.processSet, entry->params.kind, t.submitted);
    out.push_back(std::move(t));
  }
}

}  // namespace hvd::engine
