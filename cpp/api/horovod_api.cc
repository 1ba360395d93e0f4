// The free functions of horovod.h, over one default Runtime per process (the only singleton of
// the core). init() builds it from the process environment; shutdown() tears it down, after
// which init() builds a fresh one.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "api/default_runtime.h"
#include "api/launch_bootstrap.h"
#include "common/logging.h"
#include "common/messages.h"
#include "engine/elastic_join.h"
#include "engine/runtime.h"
#include "horovod/horovod.h"
#include "transport/peer_memory.h"

namespace hvd {
namespace api {
namespace {

std::shared_mutex& runtimeMutex() {
  static std::shared_mutex mu;
  return mu;
}
std::shared_ptr<engine::Runtime>& runtimeSlot() {
  static std::shared_ptr<engine::Runtime> runtime;
  return runtime;
}
// Whether init() ever succeeded in this process: operations after a shutdown fail with the
// shutdown message, not the "not initialized" one.
std::atomic<bool> everInitialized{false};

}  // namespace

std::shared_ptr<engine::Runtime> defaultRuntime() {
  std::shared_lock<std::shared_mutex> lock(runtimeMutex());
  return runtimeSlot();
}

std::shared_ptr<engine::Runtime> runtimeForOps() {
  auto runtime = defaultRuntime();
  if (!runtime || !runtime->initialized()) {
    if (everInitialized.load(std::memory_order_relaxed)) throw Aborted(kShutdownMessage);
    throw Error(kNotInitializedMessage, ErrorCode::kNotInitialized);
  }
  return runtime;
}

std::shared_ptr<engine::Runtime> runtimeForQueries() {
  auto runtime = defaultRuntime();
  if (!runtime || !runtime->initialized()) throw InvalidArgument(kNotInitializedMessage, ErrorCode::kNotInitialized);
  return runtime;
}

// The elastic round this process last left and the rank its engine lost there (-1: none).
struct ElasticLoss {
  int64_t round = -1;
  int rank = -1;
};
ElasticLoss& lastElasticLoss() {
  static ElasticLoss loss;
  return loss;
}

void shutdownAtExit() {
  try {
    shutdownDefault();
  } catch (...) {
  }
}

void initDefault(const InitOptions& options, const EnvLookup& env) {
  // Shut down at exit, before the statics that transports use are destroyed (handlers registered
  // after their construction run before their destruction).
  static std::once_flag atExit;
  std::unique_lock<std::shared_mutex> lock(runtimeMutex());
  auto& slot = runtimeSlot();
  if (slot && slot->initialized()) return;  // a second init() is a no-op
  slot.reset();
  engine::applyLogSettings(env);
  auto config = engine::Config::fromEnvironment(env);
  // Elastic jobs: this init's rank and size come from the driver (told whom the last round lost).
  engine::joinElasticRound(config, lastElasticLoss().round, lastElasticLoss().rank);
  std::shared_ptr<Store> store = bootstrapWithoutLauncher(config, options);  // may set rank and size
  const timeline::TimelineSettings timelineSettings = readTimelineSettings(env);
  AutotuneStart autotune = prepareAutotune(env, config.rank);
  auto runtime = std::make_shared<engine::Runtime>(std::move(config), std::move(store));
  // The timeline observes from before the engine's thread starts: a faster rank's first request
  // reaches rank 0's coordinator as soon as init returns there, and its arrival belongs in the
  // file (the negotiation span starts at the first one).
  startTimelineAtInit(runtime, timelineSettings);
  try {
    runtime->init(options);
  } catch (...) {
    stopTimelineAtShutdown();
    throw;
  }
  startAutotuneAtInit(runtime, std::move(autotune));
  slot = std::move(runtime);
  everInitialized.store(true, std::memory_order_relaxed);
  std::call_once(atExit, [] { std::atexit(shutdownAtExit); });
}

void shutdownDefault() {
  std::shared_ptr<engine::Runtime> runtime;
  {
    std::unique_lock<std::shared_mutex> lock(runtimeMutex());
    runtime = std::move(runtimeSlot());
  }
  if (runtime) runtime->shutdown();
  stopTimelineAtShutdown();
  if (runtime) lastElasticLoss() = {runtime->config().elasticRound, runtime->lostPeer()};
}

}  // namespace api

// ---- Shared buffers ----------------------------------------------------------------------------

OwnedTensor allocateShared(DataType dtype, std::vector<int64_t> shape) {
  OwnedTensor t;
  t.view.dtype = dtype;
  t.view.shape = std::move(shape);
  for (auto d : t.view.shape) {
    if (d < 0)
      throw InvalidArgument("allocateShared: negative dimension in shape " + engine::shapeString(t.view.shape));
  }
  t.storage = allocateSharedBuffer(t.view.bytes());
  t.view.data = t.storage.get();
  return t;
}

// ---- Lifecycle and topology --------------------------------------------------------------------

void init(const InitOptions& options) { api::initDefault(options, processEnvironment()); }
void shutdown() { api::shutdownDefault(); }
bool isInitialized() {
  auto runtime = api::defaultRuntime();
  return runtime && runtime->initialized();
}

int rank() { return api::runtimeForQueries()->topology().rank; }
int size() { return api::runtimeForQueries()->topology().size; }
int localRank() { return api::runtimeForQueries()->topology().localRank; }
int localSize() { return api::runtimeForQueries()->topology().localSize; }
int crossRank() { return api::runtimeForQueries()->topology().crossRank; }
int crossSize() { return api::runtimeForQueries()->topology().crossSize; }
bool isHomogeneous() { return api::runtimeForQueries()->topology().homogeneous; }

ElasticHostUpdates elasticHostUpdates() {
  auto runtime = api::runtimeForQueries();
  ElasticHostUpdates out;
  out.round = runtime->config().elasticRound;
  if (out.round < 0) return out;
  elastic::HostUpdates u = runtime->elasticHostUpdates();
  out.latest = u.latest;
  out.flags = u.flags;
  return out;
}

// ---- Process sets ------------------------------------------------------------------------------

int addProcessSet(std::vector<int> ranks) { return api::runtimeForQueries()->addProcessSet(std::move(ranks)); }
bool removeProcessSet(int processSetId) { return api::runtimeForQueries()->removeProcessSet(processSetId); }
std::vector<int> processSetRanks(int processSetId) { return api::runtimeForQueries()->processSetRanks(processSetId); }
std::vector<int> processSetIds() { return api::runtimeForQueries()->processSetIds(); }

// ---- Introspection ---------------------------------------------------------------------------

std::vector<CollectiveCount> engineCounters() {
  std::vector<CollectiveCount> counters;
  auto runtime = api::defaultRuntime();
  if (!runtime || !runtime->initialized()) return counters;
  for (engine::CollectiveCount& c : runtime->collectiveCounts()) {
    counters.push_back(CollectiveCount{std::move(c.backend), std::move(c.algorithm), c.count});
  }
  return counters;
}

// ---- Collectives (asynchronous) ----------------------------------------------------------------

WorkPtr allreduceAsync(const TensorView& in, const TensorView& out, const Options& options) {
  return api::runtimeForOps()->allreduce(in, out, options);
}
WorkPtr groupedAllreduceAsync(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                              const Options& options) {
  return api::runtimeForOps()->groupedAllreduce(in, out, options);
}
WorkPtr allgatherAsync(const TensorView& in, const Options& options) {
  return api::runtimeForOps()->allgather(in, options);
}
WorkPtr groupedAllgatherAsync(const std::vector<TensorView>& in, const Options& options) {
  return api::runtimeForOps()->groupedAllgather(in, options);
}
WorkPtr broadcastAsync(const TensorView& tensor, const Options& options) {
  return api::runtimeForOps()->broadcast(tensor, options);
}
WorkPtr alltoallAsync(const TensorView& in, const Options& options) {
  return api::runtimeForOps()->alltoall(in, options);
}
WorkPtr reducescatterAsync(const TensorView& in, const TensorView& out, const Options& options) {
  return api::runtimeForOps()->reducescatter(in, out, options);
}
WorkPtr groupedReducescatterAsync(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                                  const Options& options) {
  return api::runtimeForOps()->groupedReducescatter(in, out, options);
}
WorkPtr barrierAsync(int processSet) { return api::runtimeForOps()->barrier(processSet); }
WorkPtr joinAsync() { return api::runtimeForOps()->join(); }

// ---- Collectives (synchronous) -----------------------------------------------------------------

void allreduce(const TensorView& in, const TensorView& out, const Options& options) {
  allreduceAsync(in, out, options)->wait();
}
OwnedTensor allgather(const TensorView& in, const Options& options) {
  WorkPtr work = allgatherAsync(in, options);
  work->wait();
  return work->outputs().at(0);
}
void broadcast(const TensorView& tensor, const Options& options) { broadcastAsync(tensor, options)->wait(); }
OwnedTensor alltoall(const TensorView& in, const Options& options, std::vector<int32_t>* receivedSplits) {
  WorkPtr work = alltoallAsync(in, options);
  work->wait();
  if (receivedSplits != nullptr) *receivedSplits = work->receivedSplits();
  return work->outputs().at(0);
}
void reducescatter(const TensorView& in, const TensorView& out, const Options& options) {
  reducescatterAsync(in, out, options)->wait();
}
void barrier(int processSet) { barrierAsync(processSet)->wait(); }
int join() {
  WorkPtr work = joinAsync();
  work->wait();
  return work->joinResult();
}

}  // namespace hvd
