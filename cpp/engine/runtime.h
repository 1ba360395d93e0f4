// Runtime: one rank's Horovod engine. Owns the config, the rendezvous store, the transport, the
// process-set table, the tensor queue, the coordinator (rank 0), the response-cache replica, the
// collective backends (backend.h) with the fusion buffer they share, and ONE background thread. No globals: tests run several
// Runtimes in one process (threads as ranks) over one MemoryStore and the "local" transport;
// only cpp/api keeps a default instance for the free functions of horovod.h.
//
// Lifecycle: construct -> init() (blocks until every rank is in) -> collectives from any thread
// -> shutdown() (or the destructor). A Runtime is initialized at most once; to re-init, build a
// new one over the same store (a per-rank round counter in the store keeps rounds apart, so
// init -> shutdown -> init gives the same rank/size and works).
//
// The engine (runtime_loop.cc): wait for a message or a wake-up (bounded, only so that it never
// blocks forever), drain newly enqueued requests, send them to the coordinator (rank 0:
// negotiate), and execute response lists in the order the coordinator emitted them. Whoever
// holds the DriveGate's token runs it, and the engine state below is the token holder's:
//  * the background thread, normally;
//  * a thread waiting for one of the operations (drive()), while the background thread leaves
//    freshly enqueued work to the callers for up to HOROVOD_CALLER_PROGRESS_US (it parks,
//    releasing the token), and stays parked, looking for messages between windows, while the
//    callers keep driving. A training step's enqueue-then-wait then runs on the caller's thread
//    alone: no hand-off between threads, one busy thread per rank (MPI's progress model);
//  * an enqueueing thread, for the moment it takes to turn its new entry into a request
//    (wakeEngine()), when nobody else holds the token.
// The background thread keeps everything else: messages while no caller waits (compute overlap),
// and ending the engine (a caller whose drive fails or processes the shutdown leaves that to it).
//
// Failure: an exception from the transport or a collective is fatal for the Runtime: the
// current, pending and later operations fail with that error (a PeerLost stays a PeerLost), the
// other ranks get a best-effort abort notice, and the loop stops. shutdown() on any rank stops
// the loop on every rank; pending and later operations fail with Horovod's shutdown message.
//
// Files, by job: runtime_init.cc (init's steps, shutdown), runtime_enqueue.cc (the collectives'
// entry points), runtime_loop.cc (driving the engine), runtime_responses.cc (executing response
// lists), runtime_process_sets.cc (the process-set lifecycle), runtime_failures.cc (failures,
// liveness, stall scans), runtime_tuning.cc (knobs and the tuner), runtime_observe.cc (observers).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/messages.h"
#include "engine/backend.h"
#include "engine/config.h"
#include "engine/coordinator.h"
#include "engine/drive_gate.h"
#include "engine/knobs.h"
#include "engine/liveness.h"
#include "engine/message.h"
#include "engine/observer.h"
#include "engine/process_set_table.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"
#include "engine/tensor_queue.h"
#include "engine/tuner.h"
#include "horovod/operation.h"
#include "store/elastic_protocol.h"
#include "store/store.h"
#include "transport/transport.h"

namespace hvd::engine {

// This rank's placement, and the hosts of the job.
struct Topology : Placement {
  bool homogeneous = true;  // every host runs the same number of ranks
  std::vector<std::string> hostOf;  // per global rank
};

// Counters for tests and benchmarks (approximate while the loop runs).
struct RuntimeStats {
  uint64_t controlMessagesSent = 0;
  uint64_t controlBytesSent = 0;
  uint64_t responseLists = 0;  // lists processed
  uint64_t responses = 0;  // data responses executed (a fused one counts once)
  uint64_t tensors = 0;  // tensors in those responses
  uint64_t cachedTensors = 0;  // tensors that arrived as cache ids
  uint64_t hitsSent = 0;  // requests sent as cache hits
  uint64_t fullRequestsSent = 0;
  uint64_t parks = 0;  // times the background thread left fresh work to waiting callers
  uint64_t callerDrives = 0;  // waits that ran the engine on the waiting thread
  size_t fusionBufferBytes = 0;
  size_t outputBlocksMapped = 0;  // blocks the output pool mapped (reused ones count once)
  // Latency probes (only while Runtime::setLatencyProbes(true), else 0): std::chrono::steady_clock
  // times in ns since its epoch (CLOCK_MONOTONIC, so comparable between the processes of one
  // host), of the latest such event on this rank's engine's thread; 0 = never.
  int64_t lastRequestsSentNs = 0;  // requests/hits handed to the coordinator (rank 0: ingested)
  int64_t lastListBuiltNs = 0;  // rank 0: a response list built and posted to the others
  int64_t lastListStartNs = 0;  // began processing a response list
  int64_t lastDataStartNs = 0;  // began executing a data response (its collective)
};

class Runtime {
 public:
  // `store`: the rendezvous store to use (tests inject a shared MemoryStore); nullptr = choose
  // from the config (TcpStore to horovodrun's server, FileStore in HOROVOD_RENDEZVOUS_DIR,
  // MemoryStore for a single rank).
  explicit Runtime(Config config, std::shared_ptr<Store> store = nullptr);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Joins the job; blocks until every rank has. Throws InvalidArgument (bad options, process
  // sets differing between ranks), StoreError/Timeout (rendezvous). Call once.
  void init(const InitOptions& options = {});
  // Stops the engine on every rank (propagated through the coordinator); pending operations
  // fail with Aborted(kShutdownMessage). Idempotent; bounded by the configured timeout.
  void shutdown();
  // init() done and shutdown() not called on this rank (a remote shutdown keeps it true; later
  // operations then fail with the shutdown error).
  bool initialized() const { return initialized_.load(); }
  // Elastic jobs: the host-set changes the driver announced after this round formed, read over
  // the runtime's own store connection (none when not elastic). Any thread.
  elastic::HostUpdates elasticHostUpdates() const;
  // The peer whose loss ended this runtime's engine (PeerLost), or -1.
  int lostPeer() const { return lostPeer_.load(); }

  const Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }
  const std::string& jobId() const { return jobId_; }

  // ---- Process sets (collective over all ranks, issued in the same order everywhere;
  // runtime_process_sets.cc) ------------------------------------------------------------------
  int addProcessSet(std::vector<int> ranks);
  bool removeProcessSet(int processSetId);
  std::vector<int> processSetRanks(int processSetId) const;
  std::vector<int> processSetIds() const;

  // ---- Collectives: see horovod.h for the contracts ----------------------------------------
  WorkPtr allreduce(const TensorView& in, const TensorView& out, const Options& options);
  WorkPtr groupedAllreduce(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                           const Options& options);
  WorkPtr allgather(const TensorView& in, const Options& options);
  WorkPtr groupedAllgather(const std::vector<TensorView>& in, const Options& options);
  WorkPtr broadcast(const TensorView& tensor, const Options& options);
  WorkPtr alltoall(const TensorView& in, const Options& options);
  WorkPtr reducescatter(const TensorView& in, const TensorView& out, const Options& options);
  WorkPtr groupedReducescatter(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                               const Options& options);
  WorkPtr barrier(int processSet);
  WorkPtr join();

  RuntimeStats stats() const;
  // Records RuntimeStats' latency probes from now on (a clock read at each of four points of
  // every operation, so off by default: benchmarks turn it on). Any thread.
  void setLatencyProbes(bool on) { latencyProbes_.store(on, std::memory_order_relaxed); }
  // The collectives this Runtime's backends ran since init, by (backend, algorithm)
  // (collective_counters.h). Any thread.
  std::vector<CollectiveCount> collectiveCounts() const { return counters_.snapshot(); }

  // ---- Observers of the engine's events (observer.h) ---------------------------------------
  // Any thread, before or after init; the Runtime keeps a reference until removal (or its end).
  void addObserver(std::shared_ptr<EngineObserver> observer);
  // Returns whether it was subscribed. Events whose delivery already began may still arrive.
  bool removeObserver(const std::shared_ptr<EngineObserver>& observer);

  // ---- Knobs tuned at run time (knobs.h, tuner.h; runtime_tuning.cc) -----------------------
  // The knobs in force on this rank (after init: the configured ones; the fusion threshold is
  // rank 0's, rounded). Any thread.
  Knobs knobs() const;
  // Rank 0, after init: subscribes `tuner` and asks it for knob changes before each response
  // list (replacing a previous tuner). InvalidArgument on other ranks or before init.
  void setTuner(std::shared_ptr<Tuner> tuner);

 private:
  // ---- init (runtime_init.cc): bootstrap() runs the steps below in this order ----
  void bootstrap(const InitOptions& options);
  // The static process sets of `options`, sorted; InvalidArgument when one is malformed.
  std::vector<std::vector<int>> checkedStaticSets(const InitOptions& options) const;
  std::shared_ptr<Store> makeStore();
  // Joins this init's round in the store (roundStore_, jobId_), checking that every rank gave
  // the same static sets; returns every rank's hostname.
  std::vector<std::string> joinRound(const std::vector<std::vector<int>>& staticSets, Deadline deadline);
  void computeTopology(const std::vector<std::string>& hosts);
  // Rank 0's fusion options (fusion_), shared through the store: every rank fuses alike.
  void agreeFusionOptions(Deadline deadline);
  void startTransport(const std::vector<std::string>& hosts);
  // The backends' settings checked, the backends attached, the global and static sets added and
  // the knobs in force set (initKnobs).
  void registerProcessSets(const std::vector<std::vector<int>>& staticSets);
  // Rank 0: the coordinator (knowing the static sets) and the stall inspector.
  void startCoordinator(const std::vector<std::vector<int>>& staticSets);
  // Returns once every rank got this far (connected), or throws at `deadline`.
  void awaitEveryRank(Deadline deadline);
  // The background thread and, with several ranks, the liveness watch.
  void startEngine(const std::vector<std::string>& hosts);
  // ---- enqueue (runtime_enqueue.cc) ----
  WorkPtr enqueue(std::vector<EntryPtr> entries, std::shared_ptr<WorkImpl> work);
  EntryPtr makeEntry(Kind kind, const char* opName, const TensorView& in, const TensorView& out, const Options& options,
                     const std::string& name, const ProcessSetInfo& set);
  ProcessSetInfo checkProcessSet(const char* opName, int processSet, int root = -1) const;
  std::string autoName(const std::string& name);
  void checkDevices(const char* opName, const TensorView& in, const TensorView& out) const;
  void checkRunning() const;
  std::shared_ptr<WorkImpl> newWork(int members);
  // After a push: collects the request on this thread if no thread runs the engine now, else
  // wakes the engine's thread if it is blocked in awaitWork().
  void wakeEngine();
  // ---- driving the engine: background thread and driving callers (runtime_loop.cc) ----
  friend class DriveGate;
  void loop();
  // Runs the engine on a waiting thread (token held) until `work` completes or `deadline`
  // passes; false when the engine has stopped or stops meanwhile.
  bool drive(const WorkImpl& work, Deadline deadline);
  // Blocks in the transport until a message or a wake-up unless there is work already; returns
  // whether there may be something to do (false: the deadline passed with nothing). A driving
  // caller passes the work it waits for: it does not block once that completed (a backend with
  // deferred completion completes it from its own thread, then calls wakeForCompletion()).
  bool awaitWork(Deadline deadline, const WorkImpl* waitedOn = nullptr);
  // A backend completed works from its own thread: wakes a caller blocked in awaitWork() for one
  // of them (Dekker-style with the fence there). Any thread.
  void wakeForCompletion();
  // Whether the background thread should leave the queued work to a waiting caller now.
  bool leaveToCallers() const;
  // Releases the token for HOROVOD_CALLER_PROGRESS_US (longer while callers keep driving, see
  // DriveGate::nextPark), then takes it back; returns whether a caller ran the engine meanwhile.
  bool parkForCallers(std::unique_lock<std::mutex>& token);
  bool step();  // returns true when the loop must end (shutdown processed)
  void collectRequests(RequestList& out);
  void gatherBurst(RequestList& out, uint64_t pushesSeen);
  void postRequests(RequestList& list);
  void pinThread();
  // ---- executing response lists (runtime_responses.cc) ----
  bool processList(ResponseList& list);
  void processResponse(Response& response);
  void runData(Response& response);
  void expandCached(Response& response);
  Entry* findEntry(const Response& response, const TensorInfo& tensor);
  Entry* pendingEntry(int32_t processSet, std::string_view name);
  // Retires `entry` (its name is free again, the entry is reused) and completes its work member
  // with `error`, unless `completeWork` is false: a backend with deferred completion holds it.
  void completeEntry(Entry* entry, std::exception_ptr error, bool completeWork = true);
  // ---- process-set lifecycle, every rank, in list order (runtime_process_sets.cc) ----
  // The set is registered (its backends are built on its first response) and the adding
  // operation, if this rank has it, completes with the set's id.
  void addSetFromResponse(const Response& response);
  // Pending operations of the set fail, the set and its backends go, and the removing
  // operation, if this rank has it, completes.
  void removeSetFromResponse(const Response& response);
  // ---- failures and liveness (runtime_failures.cc) ----
  void failAll(const ErrorInfo& reason);
  void onFatal(std::exception_ptr error, bool notifyPeers);
  // The liveness watch found `rank` silent (its thread): the engine fails with PeerLost naming
  // it at its next step; if it is still in a transfer 20 ms later, the transport is aborted.
  void onSilentPeer(int rank, const std::string& message);
  // The error to report for `error`: a peer's relayed PeerLost naming another rank when this
  // rank only saw that peer give up (or timed out behind it); else `error` itself.
  std::exception_ptr preferRelayedCause(std::exception_ptr error);
  // Rank 0: a stall inspector scan, if one is due (the engine's thread, at each step). Logs its
  // warnings, fails diverged tensors, and throws Aborted when a stall must end the job.
  void maybeScanStalls();
  // ---- observer events that need the runtime's state (runtime_observe.cc) ----
  void publishEntry(EngineEventKind kind, const Entry& entry, uint32_t cacheId = kNoCacheId, bool failed = false);
  void publishSetChange(EngineEventKind kind, int32_t setId, const std::vector<int>& ranks);
  // A stall tick, if one is due (the engine's thread, at each step).
  void maybeStallTick();
  // How long the engine's thread may wait for work: bounded by the stall-tick interval and the
  // stall inspector's scans.
  Deadline idleDeadline() const;
  // ---- knobs (runtime_tuning.cc) ----
  void initKnobs();
  // Every rank, at the start of a list carrying knobs (the engine's thread); reaches the
  // backends through BackendTable::applyKnobs.
  void applyKnobs(const Knobs& knobs);
  // Rank 0, before each build(): hands the tuner's change, if any, to the coordinator.
  void pollTuner();

  Config config_;
  // Declared before the parts that publish into it (coordinator, backends): it outlives them.
  ObserverHub observers_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> roundStore_;
  Topology topology_;
  std::string jobId_;
  int64_t fusionThreshold_ = 0;
  FusionOptions fusion_;  // rank 0's, shared at init: every rank fuses cached responses alike
  std::unique_ptr<Transport> transport_;
  ProcessSetTable sets_;
  TensorQueue queue_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0
  std::unique_ptr<StallInspector> stall_;  // rank 0
  std::unique_ptr<LivenessWatch> liveness_;  // size > 1, unless HOROVOD_LIVENESS_TIMEOUT_SECONDS=0
  std::atomic<bool> silentPeer_{false};
  std::mutex silentMu_;
  int silentRank_ = -1;  // guarded by silentMu_
  std::string silentMessage_;  // guarded by silentMu_
  int64_t nextStallScanNs_ = 0;
  CacheReplica replica_;
  // What backends working in host memory share, and where every backend counts; then the
  // backends themselves, by (process set, device) (destroyed first).
  HostResources host_;
  CollectiveCounters counters_;
  BackendTable backends_;

  // Engine state: the token holder's (the background thread's, or a driving caller's).
  // Pending entries (drained, not yet completed) are owned by their name's NameSlot (queue_).
  // Pending entries sent as hits, by cache id; nullptr = none now (nodes of live ids are kept).
  FlatIdMap<Entry*> byCacheId_;
  std::vector<EntryPtr> drained_;
  std::vector<Entry*> entriesScratch_;
  // A deferred-completion response's works, held (WorkImpl::hold) from before run() until its
  // entries are retired, so that the backend's thread cannot complete a work whose entry still
  // holds the name (the caller would enqueue the name again into the old entry's slot).
  std::vector<std::shared_ptr<WorkImpl>> heldWorks_;
  // Responses derived from the cache hits of recent lists, while the replica is unchanged: a
  // training step repeats its lists' hits, so the steady state derives nothing.
  struct DerivedHits {
    std::vector<uint32_t> hits;
    std::vector<Response> responses;
  };
  std::vector<Response>& responsesForHits(const std::vector<uint32_t>& hits);
  std::vector<DerivedHits> derivedHits_;  // most recently used first, bounded
  uint64_t derivedHitsVersion_ = 0;
  std::vector<uint8_t> sendBuffer_;
  RequestList outgoing_;  // collected, not yet sent (or, on rank 0, ingested)
  bool callerDriving_ = false;
  uint64_t drives_ = 0;  // drives by callers so far
  std::chrono::microseconds parkWait_{0};  // the background thread's next park, if above the window
  uint64_t lastSeq_ = 0;
  int64_t nextStallTickNs_ = 0;
  bool shutdownSent_ = false;
  // A caller's drive that ended the engine, for the background thread to finish the job.
  bool callerStopped_ = false;  // step() returned true (shutdown processed)
  std::exception_ptr callerFailure_;  // step() threw

  std::shared_ptr<DriveGate> gate_;

  // Lifecycle.
  std::mutex lifecycleMu_;
  std::atomic<bool> initialized_{false};
  std::atomic<bool> shutdownRequested_{false};
  // True while the engine's thread is (about to be) blocked in waitForMessage: enqueue only
  // pays for transport.wake() then (Dekker-style handshake with seq_cst fences, see awaitWork()).
  std::atomic<bool> idle_{false};
  std::thread thread_;
  std::mutex exitMu_;
  std::condition_variable exitCv_;
  bool loopExited_ = true;
  // The loop ended on an error (a lost peer, an abort relayed by a peer, a stall shutdown): the
  // job is broken, so shutdown() does not wait for the other ranks' goodbyes.
  std::atomic<bool> loopFailed_{false};
  std::atomic<int> lostPeer_{-1};
  // The rank whose shutdown ended the engine (from the coordinator's last list), or -1.
  std::atomic<int> shutdownBy_{-1};
  std::atomic<uint64_t> nonameCounter_{0};

  // Knobs in force (applyKnobs); the engine's thread writes them, knobs() reads under knobsMu_.
  // The three below are read outside the engine's thread too (enqueue, parks): atomics.
  mutable std::mutex knobsMu_;
  Knobs knobs_;
  std::atomic<int64_t> burstQuietUs_{0};
  std::atomic<int64_t> callerProgressUs_{0};
  std::atomic<int64_t> callerSpinUs_{0};
  std::atomic<bool> hasTuner_{false};
  std::mutex tunerMu_;
  std::shared_ptr<Tuner> tuner_;  // rank 0
  Tuner::Decision tunerDecision_;  // engine thread: the tuner's reason for the knobs on their way

  // Stats (written by the engine's thread).
  // What stats() reports, kept as relaxed atomics: written by the engine's token holder, read by
  // any thread without a lock on the engine's path (approximate while the loop runs).
  struct LiveStats {
    std::atomic<uint64_t> controlMessagesSent{0}, controlBytesSent{0}, responseLists{0}, responses{0}, tensors{0},
        cachedTensors{0}, hitsSent{0}, fullRequestsSent{0}, parks{0}, callerDrives{0};
    std::atomic<size_t> fusionBufferBytes{0};
    std::atomic<int64_t> lastRequestsSentNs{0}, lastListBuiltNs{0}, lastListStartNs{0}, lastDataStartNs{0};
  };
  static void bump(std::atomic<uint64_t>& counter, uint64_t n = 1) { counter.fetch_add(n, std::memory_order_relaxed); }
  void probe(std::atomic<int64_t>& at) {
    if (latencyProbes_.load(std::memory_order_relaxed)) [[unlikely]]
      at.store(ObserverHub::nowNs(), std::memory_order_relaxed);
  }
  LiveStats stats_;
  std::atomic<bool> latencyProbes_{false};
};

}  // namespace hvd::engine
