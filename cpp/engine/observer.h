// Engine observers: the seam through which diagnostics (timeline, stall inspector, autotune,
// tests) watch one Runtime's engine without the engine knowing any of them.
//
// Shape. One event struct with a kind tag and one virtual, onEvent(), rather than a virtual per
// event family: every subscriber we plan for (a timeline writing one record per event, a
// recorder in tests, an autotuner summing bytes and times) treats events uniformly, and a new
// kind of event then costs no interface change; a subscriber ignores kinds it does not know.
// What a subscriber wants is declared up front (interests(), stallTickInterval()), so the engine
// builds only events somebody asked for.
//
// Cost. Each event site in the engine is guarded by ObserverHub::wants(kind): one relaxed load
// of a word and one branch, predicted not taken while nobody subscribes. Only past that branch
// is the clock read and the event filled in; the event's names, rank lists and pending-tensor
// lists point into the engine's own state (no copies, no strings built), and are valid only
// during the onEvent() call: copy what you keep. With subscribers, a publish takes a short lock
// to snapshot the subscriber list, then delivers outside it.
//
// Threads (who calls onEvent):
//  * kEnqueue: the thread that enqueued the operation, just before the engine can see it; so it
//    can run concurrently with other enqueuers and with the engine's events. If the enqueue is
//    then refused (duplicate name, engine shut down) the call throws and no further event follows
//    for it.
//  * Every other kind (kCycleStart included): the thread running the engine at that moment, i.e. the one holding the
//    engine's token (the background thread, a caller waiting for an operation, or briefly an
//    enqueueing thread collecting its own request). Only one thread holds it at a time, so these
//    events are totally ordered and never delivered concurrently with each other.
// onEvent() must be quick, must not block on the Runtime's operations (it may run on the only
// thread that can complete them), and should not throw: an exception is caught (logged the
// first time) and the event dropped for that subscriber. addObserver/removeObserver may be
// called from onEvent().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/knobs.h"
#include "engine/message.h"

namespace hvd::engine {

enum class EngineEventKind : uint8_t {
  // Per tensor, on this rank.
  kEnqueue = 0,      // an operation's tensor handed to the engine (bytes: its input)
  kCacheHit,         // a tensor sent to the coordinator as its cache id (cacheId) instead of a request
  kTensorDone,       // a tensor's operation completed on this rank (failed: with an error); not
                     // for operations failed wholesale by shutdown or a fatal error
  // Rank 0 only (the coordinator), per tensor negotiated in full. Tensors answered from the
  // cache are not negotiated: each rank reports kCacheHit instead.
  kNegotiateStart,   // the first request for the tensor arrived (rank: its sender)
  kNegotiateRank,    // rank `rank`'s request arrived (also for the first one)
  kNegotiateEnd,     // every required rank has requested it: it is ready
  // Per response executed on this rank (a fused response: once, naming all its tensors).
  kFusionCopyInStart,   // copying the tensors into the fusion buffer (bytes: in total)
  kFusionCopyInEnd,
  // The data exchange (bytes: see EngineEvent::bytes). The start is delivered as the exchange
  // starts, except on paths that find out only by running whether they apply (the shared in-place
  // allreduce, a fused allreduce over the tensors where they lie, the shared-output allgather):
  // there it is delivered just before the end, carrying its own start time.
  kCollectiveStart,
  kCollectiveEnd,
  kFusionCopyOutStart,  // copying the results out of the fusion buffer
  kFusionCopyOutEnd,
  // Engine-wide.
  kStallTick,          // periodic, only for subscribers with a stallTickInterval (pending)
  kProcessSetAdded,    // a process set was added (processSet, ranks)
  kProcessSetRemoved,  // a process set was removed (processSet, ranks it had)
  kCycleStart,         // the engine starts executing a response list: once per step that does
                       // work (every rank; no tensors)
  kKnobsApplied,       // the list that starts next carries new knobs (knobs), applied now on
                       // this rank: right after that list's kCycleStart (every rank)
  kCount
};
const char* eventKindName(EngineEventKind kind);  // "ENQUEUE", "CACHE_HIT", ...

using EventMask = uint32_t;
constexpr EventMask eventBit(EngineEventKind kind) { return EventMask{1} << static_cast<unsigned>(kind); }
constexpr EventMask kAllEvents = (EventMask{1} << static_cast<unsigned>(EngineEventKind::kCount)) - 1;

// The names of the tensors an event concerns, without copying them: a view over whichever
// engine structure holds them. Valid during onEvent() only.
class TensorNames {
 public:
  TensorNames() = default;
  static TensorNames one(const std::string& name);
  static TensorNames of(const std::vector<TensorInfo>& tensors);  // each tensor's data().name
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::string_view operator[](size_t i) const { return at_(source_, i); }

 private:
  using At = std::string_view (*)(const void* source, size_t i);
  const void* source_ = nullptr;
  size_t count_ = 0;
  At at_ = nullptr;
};

// One tensor not yet ready everywhere, as a stall tick sees it. On rank 0 it comes from the
// negotiation tables: `submitted` are the global ranks whose request (or cache hit) for it
// arrived, `missing` the members of its process set still expected. On other ranks it is one of
// this rank's own operations waiting for the coordinator's answer: submitted = {this rank},
// missing = {} (unknown there).
struct PendingTensor {
  int32_t processSet = 0;
  std::string_view name;
  Kind op = Kind::kAllreduce;
  bool cached = false;  // the ranks so far sent cache hits (steady state), not full requests
  // Rank 0: tells successive submissions of the same name apart (equal across ticks while the
  // same submission is pending; together with `cached`). 0 on other ranks.
  uint64_t instance = 0;
  std::vector<int> submitted;
  std::vector<int> missing;
};

struct EngineEvent {
  EngineEventKind kind = EngineEventKind::kEnqueue;
  int64_t timeNs = 0;       // std::chrono::steady_clock time in ns since its epoch
  int32_t processSet = 0;
  Kind op = Kind::kAllreduce;
  TensorNames tensors;      // the tensor(s) concerned (a response's, in order)
  // kEnqueue: the tensor's input. Fusion copies: bytes copied. Collectives: the operation's
  // payload on this rank: allreduce/reducescatter/broadcast the (summed) tensor bytes, allgather
  // the gathered output (every rank's rows), alltoall the bytes this rank sends.
  int64_t bytes = 0;
  // Collectives: the algorithm or routine that ran ("ring", "shm_direct", "allgatherv", ...),
  // a static string. Always set on kCollectiveEnd; null on a live allreduce kCollectiveStart:
  // asking for its choice before the first allreduce of a process set would itself be a
  // collective step, so it is read once the allreduce ran.
  const char* algorithm = nullptr;
  // Collectives and fusion copies: the backend that ran them (CollectiveBackend::name(), "cpu",
  // "mpi", ...), a static string.
  const char* backend = nullptr;
  int32_t rank = -1;                  // kNegotiate*: the global rank the request came from
  uint32_t cacheId = kNoCacheId;      // kCacheHit
  bool failed = false;                // kTensorDone
  std::span<const int> ranks;         // kProcessSet*: the set's global ranks
  std::span<const PendingTensor> pending;  // kStallTick
  const Knobs* knobs = nullptr;            // kKnobsApplied: the values now in force
  // kKnobsApplied on rank 0 when its tuner decided them (Tuner::Decision): the score of the
  // sample that led to them (< 0: none) and "sample" or "final" (null: not a tuner's decision).
  double score = -1;
  const char* decision = nullptr;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void onEvent(const EngineEvent& event) = 0;
  // The kinds this subscriber wants; read once, when it is added.
  virtual EventMask interests() const { return kAllEvents; }
  // Stall ticks at most this often (from the engine's thread, also while it is otherwise idle);
  // 0 = none. Read once, when the subscriber is added.
  virtual std::chrono::milliseconds stallTickInterval() const { return std::chrono::milliseconds(0); }
};

// The subscribers of one Runtime. add/remove: any thread, any time. wants/publish: the threads
// that produce events (see above). A subscriber removed while an event is being delivered may
// still receive that one event; the hub's reference (a shared_ptr) keeps it alive meanwhile.
class ObserverHub {
 public:
  void add(std::shared_ptr<EngineObserver> observer);
  // Returns whether it was subscribed.
  bool remove(const std::shared_ptr<EngineObserver>& observer);

  // Whether any subscriber wants `kind`: the guard of every event site.
  bool wants(EngineEventKind kind) const { return wantsAny(eventBit(kind)); }
  bool wantsAny(EventMask kinds) const { return (mask_.load(std::memory_order_relaxed) & kinds) != 0; }
  // The shortest stall-tick interval asked for (0 = none).
  std::chrono::milliseconds tickInterval() const {
    return std::chrono::milliseconds(tickMs_.load(std::memory_order_relaxed));
  }
  // Delivers `event` to the subscribers that want its kind; stamps timeNs with now unless set.
  void publish(EngineEvent& event) const;

  static int64_t nowNs();
  // A hub nobody subscribes to, for engine parts used without a Runtime (wants() is always false).
  static const ObserverHub& none();

 private:
  struct Subscriber {
    std::shared_ptr<EngineObserver> observer;
    EventMask mask = 0;
    int64_t tickMs = 0;
    std::shared_ptr<std::atomic<bool>> failed;  // has thrown before (logged once)
  };
  using List = std::vector<Subscriber>;
  void install(std::shared_ptr<const List> list);  // under mu_

  mutable std::mutex mu_;
  std::shared_ptr<const List> list_;  // replaced, never modified: publish delivers outside mu_
  std::atomic<EventMask> mask_{0};
  std::atomic<int64_t> tickMs_{0};
};

}  // namespace hvd::engine
