// Runtime lifecycle: rendezvous (init) and teardown (shutdown).
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "common/byte_codec.h"
#include "common/check.h"
#include "common/logging.h"
#include "engine/runtime.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "store/tcp_store.h"

namespace hvd::engine {

namespace {

// How long a shutting-down rank waits for the others to reach shutdown too before it closes its
// transport (so that messages it posted last are not lost). Ranks that shut down at the end of a
// job meet here at once; a rank that leaves early waits at most this long.
constexpr auto kTeardownGrace = std::chrono::milliseconds(2000);

std::string randomToken() {
  std::random_device device;
  std::mt19937_64 gen((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::ostringstream out;
  out << std::hex << gen();
  return out.str();
}

// What every rank publishes at rendezvous.
struct RankInfo {
  std::string hostname;
  int64_t pid = 0;
  std::vector<std::vector<int>> processSets;
};

Bytes encodeRankInfo(const RankInfo& info) {
  Bytes out;
  ByteWriter w(out);
  w.str(info.hostname);
  w.svarint(info.pid);
  w.varint(info.processSets.size());
  for (const auto& set : info.processSets) w.svarints(set);
  return out;
}

RankInfo decodeRankInfo(const Bytes& bytes) {
  ByteReader in(bytes.data(), bytes.size(), "rank info");
  RankInfo info;
  info.hostname = in.str();
  info.pid = in.svarint();
  size_t n = in.count();
  info.processSets.resize(n);
  for (auto& set : info.processSets) in.svarints(set);
  return info;
}

std::string setsText(const std::vector<std::vector<int>>& sets) {
  std::string s = "[";
  for (size_t i = 0; i < sets.size(); ++i) {
    if (i > 0) s += ", ";
    s += shapeString(std::vector<int64_t>(sets[i].begin(), sets[i].end()));
  }
  return s + "]";
}

}  // namespace

Runtime::Runtime(Config config, std::shared_ptr<Store> store)
    : config_(std::move(config)),
      store_(std::move(store)),
      sets_(config_.rank),
      gate_(std::make_shared<DriveGate>(this)) {
  host_.outputs = std::make_shared<OutputPool>(static_cast<size_t>(std::max<int64_t>(0, outputPoolBytesParam().get())));
}

Runtime::~Runtime() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    HVD_LOG(Error) << "Horovod shutdown failed: " << e.what();
  }
  std::lock_guard<std::mutex> token(gate_->token());
  gate_->close();  // works outliving the runtime keep the gate, never the runtime
}

std::shared_ptr<Store> Runtime::makeStore() {
  if (!config_.rendezvousAddr.empty()) {
    return std::make_shared<TcpStore>(config_.rendezvousAddr, static_cast<uint16_t>(config_.rendezvousPort),
                                      config_.secret, Deadline::after(config_.timeout));
  }
  if (!config_.rendezvousDir.empty()) return std::make_shared<FileStore>(config_.rendezvousDir);
  if (config_.size == 1) return std::make_shared<MemoryStore>();
  if (config_.launchedBy == "horovod") {
    throw InvalidArgument("HOROVOD_SIZE=" + std::to_string(config_.size) +
                          " but no rendezvous is configured: set HOROVOD_GLOO_RENDEZVOUS_ADDR and "
                          "HOROVOD_GLOO_RENDEZVOUS_PORT (horovodrun does), or HOROVOD_RENDEZVOUS_DIR to a "
                          "directory shared by all ranks");
  }
  throw InvalidArgument("Launched by " + config_.launchedBy + " with " + std::to_string(config_.size) +
                        " ranks but without horovodrun: set HOROVOD_RENDEZVOUS_DIR to a directory every rank "
                        "can see (a FileStore rendezvous), or HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT to a running "
                        "rendezvous server, or launch with horovodrun");
}

void Runtime::computeTopology(const std::vector<std::string>& hosts) {
  const std::vector<Placement> derived = placementsOnHosts(hosts);
  Topology t;
  static_cast<Placement&>(t) = derived[config_.rank];
  t.hostOf = hosts;
  t.homogeneous =
      std::all_of(derived.begin(), derived.end(), [&](const Placement& p) { return p.localSize == t.localSize; });
  // The launcher's placement, where it gave one, wins over the derived one.
  if (config_.localRank >= 0) t.localRank = config_.localRank;
  if (config_.localSize >= 0) t.localSize = config_.localSize;
  if (config_.crossRank >= 0) t.crossRank = config_.crossRank;
  if (config_.crossSize >= 0) t.crossSize = config_.crossSize;
  topology_ = std::move(t);
}

void Runtime::init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(lifecycleMu_);
  HVD_CHECK(!initialized_ && !transport_) << "Runtime::init called twice; build a new Runtime to re-init";
  bootstrap(options);
  initialized_ = true;
}

void Runtime::bootstrap(const InitOptions& options) {
  const std::vector<std::vector<int>> staticSets = checkedStaticSets(options);
  if (options.dynamicProcessSets) config_.dynamicProcessSets = true;
  if (!store_) store_ = makeStore();
  const Deadline deadline = Deadline::after(config_.timeout);  // for the whole rendezvous
  const std::vector<std::string> hosts = joinRound(staticSets, deadline);
  computeTopology(hosts);
  agreeFusionOptions(deadline);
  startTransport(hosts);
  registerProcessSets(staticSets);
  if (config_.rank == 0) startCoordinator(staticSets);
  awaitEveryRank(deadline);
  startEngine(hosts);
  HVD_LOG(Debug) << "Horovod initialized: rank " << config_.rank << " of " << config_.size << ", transport "
                 << transport_->name() << ", job " << jobId_;
}

std::vector<std::vector<int>> Runtime::checkedStaticSets(const InitOptions& options) const {
  const int size = config_.size;
  std::vector<std::vector<int>> staticSets;
  for (size_t i = 0; i < options.processSets.size(); ++i) {
    std::vector<int> set = options.processSets[i];
    std::sort(set.begin(), set.end());
    if (set.empty() || set.front() < 0 || set.back() >= size ||
        std::adjacent_find(set.begin(), set.end()) != set.end()) {
      throw InvalidArgument("Process set " + std::to_string(i) + " given to init() is invalid: " +
                            shapeString(std::vector<int64_t>(set.begin(), set.end())) +
                            " (ranks must be distinct and in [0, " + std::to_string(size) + "))");
    }
    if (std::find(staticSets.begin(), staticSets.end(), set) != staticSets.end() ||
        static_cast<int>(set.size()) == size) {
      throw InvalidArgument("Process set " + std::to_string(i) + " given to init() duplicates another process set: " +
                            shapeString(std::vector<int64_t>(set.begin(), set.end())));
    }
    staticSets.push_back(std::move(set));
  }
  return staticSets;
}

std::vector<std::string> Runtime::joinRound(const std::vector<std::vector<int>>& staticSets, Deadline deadline) {
  const int rank = config_.rank;
  const int size = config_.size;
  // Each init of a static job is a new round for this rank (a per-rank counter keeps re-inits
  // apart); an elastic job's round comes from its driver (elastic_join.h), as ranks change.
  int64_t round = config_.elasticRound;
  std::string roundPrefix = "horovod/e" + std::to_string(round);
  if (round < 0) {
    round = store_->add("horovod/round/" + std::to_string(rank), 1, deadline);
    roundPrefix = "horovod/r" + std::to_string(round);
  }
  roundStore_ = std::make_shared<PrefixStore>(roundPrefix, store_);

  RankInfo mine;
  mine.hostname = config_.hostname;
  mine.pid = static_cast<int64_t>(getpid());
  mine.processSets = staticSets;
  roundStore_->set("rank/" + std::to_string(rank), encodeRankInfo(mine), deadline);
  if (rank == 0) setString(*roundStore_, "job", randomToken(), deadline);

  std::vector<std::string> hosts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    RankInfo info = r == rank ? mine : decodeRankInfo(roundStore_->get("rank/" + std::to_string(r), deadline));
    hosts[r] = info.hostname;
    if (info.processSets != staticSets) {
      throw InvalidArgument("Process sets given to init() differ between ranks: rank " + std::to_string(rank) +
                            " has " + setsText(staticSets) + ", rank " + std::to_string(r) + " has " +
                            setsText(info.processSets) + ". They must be identical on all ranks.");
    }
  }
  jobId_ = getString(*roundStore_, "job", deadline) + "-r" + std::to_string(round);
  return hosts;
}

void Runtime::agreeFusionOptions(Deadline deadline) {
  fusionThreshold_ = Config::roundFusionThreshold(config_.fusionThreshold, topology_.localSize, topology_.homogeneous);
  // Every rank fuses the responses of cache hits itself (cachedResponses): all must use the same
  // options, rank 0's (the coordinator's), even if the environment differs between ranks.
  if (config_.rank == 0) {
    Bytes fusion;
    ByteWriter w(fusion);
    w.svarint(fusionThreshold_);
    w.u8(config_.disableGroupFusion ? 1 : 0);
    roundStore_->set("fusion", fusion, deadline);
    fusion_.threshold = fusionThreshold_;
    fusion_.disableGroupFusion = config_.disableGroupFusion;
  } else {
    Bytes fusion = roundStore_->get("fusion", deadline);
    ByteReader in(fusion.data(), fusion.size(), "fusion options");
    fusion_.threshold = in.svarint();
    fusion_.disableGroupFusion = in.u8() != 0;
  }
}

void Runtime::startTransport(const std::vector<std::string>& hosts) {
  TransportContext ctx;
  ctx.rank = config_.rank;
  ctx.size = config_.size;
  ctx.hostOf = hosts;
  ctx.store = std::make_shared<PrefixStore>("transport", roundStore_);
  ctx.jobId = jobId_;
  ctx.secret = config_.secret;
  ctx.interface = config_.interface;
  ctx.reachableAddress = config_.rendezvousAddr;
  ctx.timeout = config_.timeout;
  transport_ = makeTransport(config_.transport, ctx);
}

void Runtime::registerProcessSets(const std::vector<std::vector<int>>& staticSets) {
  std::vector<int> all(static_cast<size_t>(config_.size));
  for (int r = 0; r < config_.size; ++r) all[r] = r;
  checkBackendConfigs(config_);  // a setting no backend can work with fails init, as the first collective would
  backends_.attach(
      BackendEnvironment{&config_, transport_.get(), &host_, &observers_, &counters_, [this] { wakeForCompletion(); }});
  sets_.add(0, all);
  for (size_t i = 0; i < staticSets.size(); ++i) sets_.add(static_cast<int32_t>(i + 1), staticSets[i]);
  initKnobs();
}

void Runtime::startCoordinator(const std::vector<std::vector<int>>& staticSets) {
  Coordinator::Options copts;
  copts.size = config_.size;
  copts.cacheCapacity = config_.cacheCapacity;
  copts.fusion = fusion_;
  copts.observers = &observers_;
  coordinator_ = std::make_unique<Coordinator>(copts);
  StallOptions sopts;
  sopts.enabled = config_.stallCheck;
  sopts.checkTime = config_.stallCheckTime;
  sopts.shutdownTime = config_.stallShutdownTime;
  stall_ = std::make_unique<StallInspector>(sopts);
  nextStallScanNs_ = 0;
  for (size_t i = 0; i < staticSets.size(); ++i) {
    coordinator_->addProcessSet(static_cast<int32_t>(i + 1), staticSets[i]);
  }
}

void Runtime::awaitEveryRank(Deadline deadline) {
  // Everyone is connected before anyone returns from init.
  roundStore_->set("ready/" + std::to_string(config_.rank), Bytes{1}, deadline);
  std::vector<std::string> keys;
  for (int r = 0; r < config_.size; ++r) keys.push_back("ready/" + std::to_string(r));
  roundStore_->wait(keys, deadline);
}

void Runtime::startEngine(const std::vector<std::string>& hosts) {
  {
    std::lock_guard<std::mutex> lock(exitMu_);
    loopExited_ = false;
  }
  thread_ = std::thread([this] { loop(); });
  if (config_.size > 1 && config_.livenessTimeout.count() > 0) {
    LivenessWatch::Options lopts;
    lopts.rank = config_.rank;
    lopts.size = config_.size;
    lopts.hostOf = hosts;
    lopts.timeout = config_.livenessTimeout;
    lopts.interval = std::max(std::chrono::milliseconds(50), config_.livenessTimeout / 6);
    liveness_ = std::make_unique<LivenessWatch>(
        roundStore_, lopts, [this](int silent, const std::string& message) { onSilentPeer(silent, message); });
  }
}

elastic::HostUpdates Runtime::elasticHostUpdates() const {
  if (config_.elasticRound < 0 || !store_) return {};
  return elastic::readHostUpdates(*store_, config_.elasticUpdatesSeen, Deadline::after(config_.timeout));
}

void Runtime::shutdown() {
  std::lock_guard<std::mutex> lock(lifecycleMu_);
  // First: the watch may be about to abort the transport, and peers must not take this rank's
  // departure for silence.
  if (liveness_) liveness_->stop();
  if (!transport_) {
    initialized_ = false;
    return;
  }
  if (thread_.joinable()) {
    shutdownRequested_ = true;
    transport_->wake();
    gate_->unpark();
    std::unique_lock<std::mutex> exitLock(exitMu_);
    if (!exitCv_.wait_for(exitLock, config_.timeout, [&] { return loopExited_; })) {
      // The coordinator never answered: stop our blocking calls and leave.
      HVD_LOG(Warning) << "Horovod shutdown: the engine did not stop within " << config_.timeout.count()
                       << " ms; aborting this rank's transport";
      transport_->abort("shutdown timed out");
      exitCv_.wait_for(exitLock, config_.timeout, [&] { return loopExited_; });
    }
    exitLock.unlock();
    thread_.join();
  }
  // Give the other ranks a moment to read what we posted last, then close. After a failure the
  // survivors have had their abort notice already and the lost ranks will never say goodbye:
  // waiting would only hold every survivor's shutdown for the whole grace. The goodbye itself is
  // still said: a rank that left on purpose (its script raised, so its shutdown failed everyone
  // else's operations) waits for it, and must not wait the whole grace while an elastic driver
  // waits for its exit before the next round.
  try {
    Deadline grace = Deadline::after(loopFailed_ ? kTeardownGrace / 4 : kTeardownGrace);
    roundStore_->set("bye/" + std::to_string(config_.rank), Bytes{1}, grace);
    if (!loopFailed_) {
      std::vector<std::string> keys;
      for (int r = 0; r < config_.size; ++r) keys.push_back("bye/" + std::to_string(r));
      roundStore_->wait(keys, grace);
    }
  } catch (const std::exception&) {
    // Other ranks left earlier or are gone (or the store with them); nothing to wait for.
  }
  {
    std::lock_guard<std::mutex> tunerLock(tunerMu_);
    if (tuner_) observers_.remove(tuner_);
    tuner_.reset();
    hasTuner_ = false;
  }
  backends_.clear();
  sets_.clear();
  transport_.reset();
  coordinator_.reset();
  stall_.reset();
  liveness_.reset();
  host_.outputs->close();  // cached blocks go back; outputs still held stay valid
  initialized_ = false;
}

}  // namespace hvd::engine
