// Coordinator: global rank 0's negotiation state, for every process set.
//
// Deviation from Horovod (observable semantics unchanged): Horovod runs one coordinator per
// process set (its rank 0) and coordinates sets one after another in lockstep cycles. Here global
// rank 0 coordinates all sets and emits ONE globally ordered response list; every rank executes
// the responses of its sets in that order. Since every pair of ranks then runs its collectives in
// the same relative order, the data-plane streams between them need no tags and cannot deadlock.
//
// Cached steady state: a name whose every required rank sent a cache hit is answered by its id
// only, in ResponseList::hits (a bit vector on the wire); every rank derives the fused responses
// from its replica. Negotiated names travel as full responses in ResponseList::items.
//
// Event-driven: the runtime feeds each rank's RequestList as it arrives (its own first, then
// other ranks' in rank order) and asks build() for the responses that became ready; there is no
// cycle timer. A name is ready when every member of its set (minus joined ranks, for the global
// set) requested it; the order of the ready list is the order in which names became ready, which
// within one batch is Horovod's order (rank 0's requests first, then rank 1, 2, ...).
//
// Background thread of rank 0 only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/id_map.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/negotiation.h"
#include "engine/observer.h"
#include "engine/response_cache.h"

namespace hvd::engine {

class Coordinator {
 public:
  struct Options {
    int size = 1;
    int64_t cacheCapacity = 0;
    FusionOptions fusion;
    // Receives the negotiation events (observer.h); outlives the coordinator. nullptr = none.
    const ObserverHub* observers = nullptr;
  };
  explicit Coordinator(Options options);

  // Process sets known at init (id -> ascending global ranks; id 0 = all ranks).
  void addProcessSet(int32_t id, std::vector<int> ranks);

  // Takes one rank's new requests. Call with rank 0's list first, then others in rank order.
  void ingest(int rank, RequestList& list);
  // The responses that became ready since the last call, fused and ordered, with cache updates.
  // Returns a list with no items and no shutdown when nothing is ready.
  ResponseList build();

  // A knob change (engine/knobs.h): the next build() applies it to the coordinator's own
  // decisions (the fusion threshold of negotiated responses; a disabled response cache evicts
  // every entry, announced in that list) and carries it in its list, which then goes out even
  // if nothing else is ready. A second call before that build() replaces the first.
  void retune(const Knobs& knobs) { pendingKnobs_ = knobs; }

  bool shutdownRequested() const { return shutdown_; }
  // Whether build() has something to return right now.
  bool hasWork() const {
    return !readyHits_.empty() || !ready_.empty() || !evicted_.empty() || joinDone_ || pendingKnobs_.has_value();
  }
  uint64_t lastSeq() const { return seq_; }
  // Every tensor some rank requested (in full or as a cache hit) that is not ready yet, with the
  // ranks that did and the members still missing; appended to `out` (for stall ticks and the
  // stall inspector).
  void pendingTensors(std::vector<PendingTensor>& out) const;
  // Answers the pending tensor (processSet, name) with a mismatch error carrying `message` in
  // the next build(), whoever has submitted it so far (the stall inspector's verdict on ranks
  // that diverged). No effect when nothing is pending under that name.
  void failPending(int32_t processSet, const std::string& name, std::string message);

 private:
  struct Pending {
    std::vector<Request> requests;  // arrival order
    uint64_t serial = 0;            // tells successive submissions of one name apart
  };
  // A cache id's hits of the current round: how many arrived, and how many rounds ended before
  // (the round tells successive steps' hits apart for the stall inspector).
  struct HitCount {
    uint32_t count = 0;
    uint32_t round = 0;
  };
  // A name answered with a mismatch before every member had submitted it: the members still
  // owed that answer get it when their request arrives, until some other rank reuses the name.
  struct Owed {
    std::string message;
    std::vector<int> ranks;
  };
  struct ReadyItem {
    uint32_t hitId = kNoCacheId;  // ready from hits: a live cache id
    NameKey key;                  // ready through negotiation
  };
  struct GroupHold {
    std::vector<ReadyItem> items;
  };

  int required(int32_t processSet, Kind kind) const;
  const std::vector<int>* setRanks(int32_t processSet) const;
  void addHit(int rank, uint32_t id);
  // The ranks whose hits on `id` are pending, in arrival order; they stop being pending.
  std::vector<int32_t> takeHits(uint32_t id);
  // Drops the log entries of hits no longer pending (a hit that stays pending for many steps
  // would otherwise keep every later step's entries).
  void compactHitLog();
  void addRequest(Request request);
  // addRequest's parts: a new pending name takes the hits already sent for it as requests; the
  // observers hear of the requests from `arrived` on; a request that conflicts with the first is
  // answered at once (true) when the rules find a mismatch.
  void openPending(const Request& request, const std::vector<int>& ranks, Pending& pending);
  void notifyArrivals(const NameKey& key, const Pending& pending, size_t arrived) const;
  bool failedEarly(const NameKey& key, const Pending& pending);
  NegotiationContext contextFor(int32_t processSet) const;
  // Fails `key` now with `message` (answered by negotiate()); the members that have not
  // submitted it yet are owed the same answer.
  void failEarly(const NameKey& key, const Pending& pending, std::string message);
  // An owed member's request (see Owed): answered with the error; true if it was one.
  bool answerOwed(const Request& request);
  void join(int rank);
  void maybeReady(const NameKey& key, Pending& pending);
  void markReady(ReadyItem item, const std::string& group, int32_t groupSize, int32_t processSet);
  void recheckAfterJoin();
  // build()'s parts: the ready hits (sorted ids; full responses where joins require them) and
  // negotiated names; and the pending hits on ids evicted in this batch, turned into requests.
  void takeReady(std::vector<uint32_t>& hits, std::vector<Response>& singles);
  void renegotiateHitsOfEvicted();
  // A hit answered in full form (not derivable from the replicas alone: a shared in-place entry
  // of the global set while ranks have joined).
  Response fullFromCache(uint32_t id, const CacheEntry& entry);
  Response negotiate(const NameKey& key);
  // negotiate()'s parts: a failure recorded for the name (failEarly, failPending) replaces the
  // response; process-set changes are applied to the coordinator's own table (an error response
  // when they cannot be); the response cache keeps, replaces, inserts or evicts the name's entry.
  void applyRecordedFailure(const NameKey& key, Response& r);
  void addProcessSet(Response& r);
  void removeProcessSet(Response& r);
  void updateCache(const NameKey& key, Response& r, bool mayInsert);
  // build()'s other parts: the knob change it announces, the state of removed sets, and the
  // join and evict responses that end a list (each resets what it reports).
  void applyPendingKnobs();
  void forgetRemovedSets();
  Response takeJoinResponse();
  Response takeEvictResponse();
  void notify(EngineEventKind kind, const NameKey& key, Kind op, int rank) const;
  // Members of `processSet` expected for `kind` that are not in `submitted` (ascending).
  std::vector<int> missingRanks(int32_t processSet, Kind kind, const std::vector<int>& submitted) const;

  Options options_;
  std::optional<Knobs> pendingKnobs_;
  const ObserverHub* observers_;
  CoordinatorCache cache_;
  uint64_t seq_ = 0;
  bool shutdown_ = false;
  int32_t shutdownBy_ = -1;  // the first rank whose requests asked for the shutdown
  std::map<int32_t, std::vector<int>> sets_;
  int32_t nextSetId_ = 1;
  std::unordered_map<NameKey, Pending, NameKeyHash, NameKeyEq> pending_;
  // Hits not yet ready: a count per cache id (slots stay at 0 rather than being erased, so the
  // steady state allocates nothing), and the (id, rank) pairs in arrival order, which matter only
  // when hits must be renegotiated. The log empties whenever no hit is pending: in a steady state
  // after every step. Kept flat because a step touches every id of its tensors (~1 bit each on
  // the wire): hundreds of heap objects per step would be hundreds of cache misses.
  FlatIdMap<HitCount> hitCounts_;
  std::vector<std::pair<uint32_t, int32_t>> hitLog_;
  size_t pendingHits_ = 0;
  std::unordered_map<NameKey, GroupHold, NameKeyHash, NameKeyEq> groups_;  // key: (set, group base name)
  std::vector<uint32_t> readyHits_;  // ids ready from hits alone (the steady state's only kind)
  std::vector<ReadyItem> ready_;     // names ready through negotiation, and groups
  std::vector<ReadyItem> building_;  // build()'s working copy of ready_ (keeps its capacity)
  std::vector<uint64_t> lastSeqOf_;  // per rank
  std::vector<uint8_t> joined_;      // per global rank
  int joinedCount_ = 0;
  int lastJoined_ = -1;
  bool joinDone_ = false;
  std::vector<uint32_t> evicted_;    // to announce in the next list
  std::vector<int32_t> removedSets_;
  uint64_t nextSerial_ = 0;
  // Names to answer with an error when negotiated (failEarly, failPending), and answers owed.
  std::unordered_map<NameKey, std::string, NameKeyHash, NameKeyEq> failures_;
  std::unordered_map<NameKey, Owed, NameKeyHash, NameKeyEq> owed_;
};

}  // namespace hvd::engine
