#include "env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/check.h"
#include "common/params.h"
#include "common/python_float.h"
#include "options.h"

extern char** environ;

namespace hvd::launcher {
namespace {

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string boolText(bool v) { return v ? "1" : "0"; }

const Param<bool> kMallocHugepages(
    "HOROVOD_MALLOC_HUGEPAGES", true,
    "horovodrun: add glibc.malloc.hugetlb=1 to the workers' GLIBC_TUNABLES (huge pages for large "
    "malloc blocks such as CPU tensors; 0 keeps glibc's default)");

constexpr const char* kHugetlbTunable = "glibc.malloc.hugetlb";

}  // namespace

bool isExcludedName(const std::string& name) {
  return name.rfind("BASH_FUNC_", 0) == 0 || name == "OLDPWD" || endsWith(name, "CUDA_VISIBLE_DEVICES") ||
         name == kDriverSecretEnv || name == kSecretEnv;
}

EnvMap inheritedEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string name(*e, eq - *e);
    if (name.empty() || isExcludedName(name)) continue;
    env[name] = eq + 1;
  }
  return env;
}

EnvMap knobEnvironment(const Options& o) {
  EnvMap env;
  auto setInt = [&](const char* name, const std::optional<int64_t>& v) {
    if (v.has_value()) env[name] = std::to_string(*v);
  };
  if (o.fusionThresholdMb.has_value()) {
    env["HOROVOD_FUSION_THRESHOLD"] = std::to_string(*o.fusionThresholdMb * 1024 * 1024);
  }
  if (o.cycleTimeMs.has_value()) env["HOROVOD_CYCLE_TIME"] = pythonFloat(*o.cycleTimeMs);
  setInt("HOROVOD_CACHE_CAPACITY", o.cacheCapacity);
  if (o.hierarchicalAllreduce.has_value()) env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = boolText(*o.hierarchicalAllreduce);
  if (o.hierarchicalAllgather.has_value()) env["HOROVOD_HIERARCHICAL_ALLGATHER"] = boolText(*o.hierarchicalAllgather);
  if (o.torusAllreduce.has_value()) env["HOROVOD_TORUS_ALLREDUCE"] = boolText(*o.torusAllreduce);

  if (o.autotune.has_value()) {
    env["HOROVOD_AUTOTUNE"] = boolText(*o.autotune);
    if (*o.autotune) {
      // The sub-settings only mean something while autotuning.
      if (o.autotuneLogFile.has_value()) env["HOROVOD_AUTOTUNE_LOG"] = *o.autotuneLogFile;
      setInt("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", o.autotuneWarmupSamples);
      setInt("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", o.autotuneStepsPerSample);
      setInt("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", o.autotuneBayesOptMaxSamples);
      if (o.autotuneGaussianProcessNoise.has_value()) {
        env["HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"] = pythonFloat(*o.autotuneGaussianProcessNoise);
      }
    }
  }

  if (o.timelineFilename.has_value()) {
    env["HOROVOD_TIMELINE"] = *o.timelineFilename;
    if (o.timelineMarkCycles.has_value()) env["HOROVOD_TIMELINE_MARK_CYCLES"] = boolText(*o.timelineMarkCycles);
  }

  if (o.stallCheck.has_value()) env["HOROVOD_STALL_CHECK_DISABLE"] = boolText(!*o.stallCheck);
  setInt("HOROVOD_STALL_CHECK_TIME_SECONDS", o.stallCheckWarningTimeSeconds);
  setInt("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", o.stallCheckShutdownTimeSeconds);

  if (o.mpiThreadsDisable.has_value()) env["HOROVOD_MPI_THREADS_DISABLE"] = boolText(*o.mpiThreadsDisable);
  if (o.tcp) env["NCCL_IB_DISABLE"] = "1";
  setInt("HOROVOD_NUM_NCCL_STREAMS", o.numNcclStreams);
  setInt("HOROVOD_THREAD_AFFINITY", o.threadAffinity);
  setInt("HOROVOD_GLOO_TIMEOUT_SECONDS", o.glooTimeoutSeconds);

  if (o.logLevel.has_value()) env["HOROVOD_LOG_LEVEL"] = *o.logLevel;
  if (o.logWithTimestamp.has_value()) env["HOROVOD_LOG_HIDE_TIME"] = boolText(!*o.logWithTimestamp);
  return env;
}

EnvMap jobEnvironment(const NetworkChoice& network, int rendezvousPort) {
  EnvMap env;
  env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = network.driverAddress;
  env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = std::to_string(rendezvousPort);
  env["HOROVOD_CONTROLLER"] = "gloo";
  env["HOROVOD_CPU_OPERATIONS"] = "gloo";
  if (!network.nics.empty()) {
    env["HOROVOD_GLOO_IFACE"] = network.nics[0];
    std::string joined;
    for (const auto& nic : network.nics) joined += (joined.empty() ? "" : ",") + nic;
    env["NCCL_SOCKET_IFNAME"] = joined;
  }
  env["PYTHONUNBUFFERED"] = "1";
  return env;
}

EnvMap mallocEnvironment(const EnvMap& inherited) {
  std::vector<std::pair<std::string, std::string>> knob;
  if (auto it = inherited.find(kMallocHugepages.name()); it != inherited.end()) knob.emplace_back(*it);
  bool wanted;
  try {
    wanted = kMallocHugepages.get(mapEnvironment(knob));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (!wanted) return {};
  auto given = inherited.find("GLIBC_TUNABLES");
  const std::string tunables = given == inherited.end() ? "" : given->second;
  std::stringstream items(tunables);  // name=value[:name=value...]
  for (std::string item; std::getline(items, item, ':');) {
    if (item.rfind(std::string(kHugetlbTunable) + "=", 0) == 0) return {};
  }
  const std::string ours = std::string(kHugetlbTunable) + "=1";
  return {{"GLIBC_TUNABLES", tunables.empty() ? ours : tunables + ":" + ours}};
}

EnvMap slotEnvironment(const SlotInfo& slot) {
  return {
      {"HOROVOD_HOSTNAME", slot.hostname},
      {"HOROVOD_RANK", std::to_string(slot.rank)},
      {"HOROVOD_SIZE", std::to_string(slot.size)},
      {"HOROVOD_LOCAL_RANK", std::to_string(slot.localRank)},
      {"HOROVOD_LOCAL_SIZE", std::to_string(slot.localSize)},
      {"HOROVOD_CROSS_RANK", std::to_string(slot.crossRank)},
      {"HOROVOD_CROSS_SIZE", std::to_string(slot.crossSize)},
  };
}

std::string generateSecret() {
  unsigned char bytes[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  HVD_SYSCHECK(fd >= 0, "open /dev/urandom");
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      HVD_SYSCHECK(false, "read /dev/urandom");
    }
    got += static_cast<size_t>(n);
  }
  close(fd);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string jobSecret() {
  const char* given = std::getenv(kDriverSecretEnv);
  if (given != nullptr && *given != '\0') return given;
  return generateSecret();
}

std::vector<std::string> renderEnvironment(const std::vector<const EnvMap*>& layers) {
  EnvMap merged;
  for (const EnvMap* layer : layers) {
    for (const auto& [k, v] : *layer) merged[k] = v;
  }
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

}  // namespace hvd::launcher
