#include "lsf_launch.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/check.h"
#include "network.h"
#include "process.h"
#include "rendezvous.h"

namespace hvd::launcher {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

void addSlots(std::vector<HostSlots>& hosts, const std::string& host, int slots) {
  for (auto& h : hosts) {
    if (h.host == host) {
      h.slots += slots;
      return;
    }
  }
  hosts.push_back({host, slots});
}

// "h1 n1 h2 n2 ...": a host and its slot count, in allocation order.
std::vector<HostSlots> parseMcpuHosts(const std::string& text) {
  std::vector<std::string> items = words(text);
  if (items.empty() || items.size() % 2 != 0) {
    throw UsageError("LSB_MCPU_HOSTS='" + text + "' is not 'host slots [host slots ...]'");
  }
  std::vector<HostSlots> hosts;
  for (size_t i = 0; i < items.size(); i += 2) {
    char* end = nullptr;
    long slots = std::strtol(items[i + 1].c_str(), &end, 10);
    if (*end != '\0' || slots < 1) {
      throw UsageError("LSB_MCPU_HOSTS='" + text + "': '" + items[i + 1] + "' (slots of " + items[i] +
                       ") is not a positive number");
    }
    addSlots(hosts, items[i], static_cast<int>(slots));
  }
  return hosts;
}

std::string getOr(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string joined(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace

std::optional<LsfAllocation> detectLsf(const EnvMap& env) {
  std::string jobId = getOr(env, "LSB_JOBID");
  if (jobId.empty()) return std::nullopt;
  LsfAllocation lsf;
  lsf.jobId = jobId;
  std::string mcpu = getOr(env, "LSB_MCPU_HOSTS");
  if (!mcpu.empty()) {
    lsf.hosts = parseMcpuHosts(mcpu);
  } else {
    for (const auto& host : words(getOr(env, "LSB_HOSTS"))) addSlots(lsf.hosts, host, 1);
  }
  if (lsf.hosts.size() > 1) lsf.hosts.erase(lsf.hosts.begin());  // the launch node
  return lsf;
}

std::string jsrunRankfile(const std::vector<HostSlots>& hosts, int np) {
  std::vector<SlotInfo> slots = assignSlots(hosts, np);
  std::ostringstream out;
  out << "overlapping_rs: allow\ncpu_index_using: logical\n";
  for (const SlotInfo& slot : slots) {
    int cores = 1;
    for (const auto& h : hosts) {
      if (h.host == slot.hostname) cores = h.slots;
    }
    const int perRank = std::max(1, cores / slot.localSize);
    const int first = slot.localRank * perRank;
    out << "rank: " << slot.rank << ": { hostname: " << slot.hostname << "; cpu: {" << first << "-"
        << first + perRank - 1 << "} ; gpu: * ; mem: * }\n";
  }
  return out.str();
}

std::vector<std::string> jsrunArguments(const Options& o, const std::string& jsrun, const std::string& rankfilePath) {
  std::vector<std::string> argv = {jsrun, "--erf_input", rankfilePath};
  if (o.outputFilename.has_value()) {
    argv.insert(argv.end(), {"--stdio_stderr", *o.outputFilename, "--stdio_stdout", *o.outputFilename});
  }
  // jsrun starts Spectrum MPI jobs: --tcp is its -tcp (no InfiniBand), as under mpirun.
  std::vector<std::string> smpi;
  if (o.tcp) smpi.push_back("-tcp");
  if (o.mpiArgs.has_value() && !o.mpiArgs->empty()) smpi.push_back(*o.mpiArgs);
  if (!smpi.empty()) argv.insert(argv.end(), {"--smpiargs", joined(smpi, " ")});
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

int runJsrunJob(const Options& o, const LsfAllocation& lsf, int signalFd) {
  const char* path = std::getenv("PATH");
  std::string jsrun = resolveExecutable("jsrun", path != nullptr ? path : "/usr/bin:/bin");
  if (jsrun.empty() || access(jsrun.c_str(), X_OK) != 0) {
    throw UsageError("--jsrun: LSF job " + lsf.jobId +
                     " found, but jsrun is not on PATH (load the module that "
                     "provides it, or use --gloo)");
  }
  std::vector<HostSlots> hosts = lsf.hosts;
  if (o.hostfile.has_value()) {
    hosts = parseHostfile(*o.hostfile);
  } else if (o.hosts.has_value()) {
    hosts = parseHosts(*o.hosts);
  }
  if (hosts.empty()) {
    throw UsageError("LSF job " + lsf.jobId +
                     ": neither LSB_MCPU_HOSTS nor LSB_HOSTS names its hosts; pass them with -H or -hostfile");
  }
  const int np = o.numProc.value_or(totalSlots(hosts));
  std::string rankfile = jsrunRankfile(hosts, np);  // throws when np exceeds the slots

  std::vector<std::string> remoteHosts;
  for (const auto& h : hosts) {
    if (!isLocalHost(h.host)) remoteHosts.push_back(h.host);
  }
  NetworkChoice network = chooseNetwork(o.networkInterfaces, remoteHosts);
  std::string secret = jobSecret();
  Rendezvous rendezvous(remoteHosts.empty() ? network.driverAddress : "0.0.0.0", secret);

  EnvMap env = inheritedEnvironment();
  for (const auto& [k, v] : mallocEnvironment(env)) env[k] = v;
  for (const auto& [k, v] : knobEnvironment(o)) env[k] = v;
  env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = network.driverAddress;
  env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = std::to_string(rendezvous.port());
  if (!network.detected && !network.nics.empty()) {
    env["HOROVOD_GLOO_IFACE"] = network.nics[0];
    env["NCCL_SOCKET_IFNAME"] = joined(network.nics, ",");
  }
  env["PYTHONUNBUFFERED"] = "1";
  env[kSecretEnv] = secret;

  // The rankfile lives as long as the job, in the launcher's temporary directory.
  const char* tmp = std::getenv("TMPDIR");
  std::string rankfilePath = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/horovodrun-jsrun-XXXXXX";
  int fd = mkstemp(rankfilePath.data());
  HVD_SYSCHECK(fd >= 0, "mkstemp " + rankfilePath);
  bool written = writeAll(fd, rankfile.data(), rankfile.size());
  close(fd);
  if (!written) {
    unlink(rankfilePath.c_str());
    throw LaunchError("could not write the jsrun rankfile " + rankfilePath);
  }
  std::vector<std::string> argv = jsrunArguments(o, jsrun, rankfilePath);
  if (o.verbose) {
    std::string shown;
    for (const auto& a : argv) shown += (shown.empty() ? "" : " ") + a;
    std::string text = "horovodrun: running " + shown + "\nhorovodrun: rankfile " + rankfilePath + ":\n" + rankfile;
    writeAll(2, text.data(), text.size());
  }
  SpawnRequest request;
  request.path = jsrun;
  request.argv = argv;
  request.env = renderEnvironment({&env});
  request.inheritStdio = true;
  request.newProcessGroup = false;  // jsrun reads the terminal, as mpirun does
  int code;
  try {
    code = waitForegroundChild(spawnProcess(request).pid, signalFd);
  } catch (...) {
    unlink(rankfilePath.c_str());
    throw;
  }
  unlink(rankfilePath.c_str());
  return code;
}

}  // namespace hvd::launcher
