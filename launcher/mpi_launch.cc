#include "mpi_launch.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>

#include "common/deadline.h"
#include "process.h"
#include "spawn_ssh.h"

namespace hvd::launcher {
namespace {

bool validName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

}  // namespace

MpiImpl detectMpi(const std::string& mpirunPath) {
  if (mpirunPath.empty()) return MpiImpl::kMissing;
  SpawnRequest request;
  request.path = mpirunPath;
  request.argv = {mpirunPath, "--version"};
  EnvMap own = inheritedEnvironment();
  request.env = renderEnvironment({&own});
  request.mergeStderr = true;
  SpawnedProcess p;
  try {
    p = spawnProcess(request);
  } catch (const Error&) {
    return MpiImpl::kMissing;
  }
  std::string output;
  Deadline deadline = Deadline::after(std::chrono::seconds(10));
  while (!deadline.expired()) {
    pollfd pfd{p.stdoutFd, POLLIN, 0};
    poll(&pfd, 1, deadline.pollTimeoutMs(100));
    char buf[4096];
    ssize_t n = read(p.stdoutFd, buf, sizeof(buf));
    if (n > 0) {
      output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      break;
    }
  }
  close(p.stdoutFd);
  kill(-p.pid, SIGKILL);  // no-op if it already exited
  waitpid(p.pid, nullptr, 0);
  if (output.find("Open MPI") != std::string::npos || output.find("OpenRTE") != std::string::npos) {
    return MpiImpl::kOpenMpi;
  }
  if (output.find("IBM Spectrum MPI") != std::string::npos) return MpiImpl::kSpectrum;
  if (output.find("Intel(R) MPI") != std::string::npos) return MpiImpl::kIntel;
  if (output.find("HYDRA") != std::string::npos || output.find("MPICH") != std::string::npos) return MpiImpl::kMpich;
  return MpiImpl::kUnknown;
}

const char* mpiImplName(MpiImpl impl) {
  switch (impl) {
    case MpiImpl::kOpenMpi: return "Open MPI";
    case MpiImpl::kSpectrum: return "IBM Spectrum MPI";
    case MpiImpl::kMpich: return "MPICH";
    case MpiImpl::kIntel: return "Intel MPI";
    case MpiImpl::kUnknown: return "unknown MPI";
    case MpiImpl::kMissing: return "no mpirun";
  }
  return "";
}

std::string buildMpirunCommand(const Options& o, const MpiJob& job) {
  std::vector<std::string> hostItems;
  for (const auto& h : job.hosts) hostItems.push_back(h.host + ":" + std::to_string(h.slots));
  std::vector<std::string> cmd = {"mpirun"};
  std::string sshArgs;
  if (o.sshPort.has_value()) sshArgs += "-p " + std::to_string(*o.sshPort);
  if (o.sshIdentityFile.has_value()) sshArgs += (sshArgs.empty() ? "" : " ") + std::string("-i ") + *o.sshIdentityFile;
  std::string nics = join(job.nics, ",");

  if (job.impl == MpiImpl::kMpich || job.impl == MpiImpl::kIntel) {
    int slots = job.hosts.empty() ? job.np : job.hosts[0].slots;
    for (const auto& h : job.hosts) {
      if (h.slots != slots) {
        throw UsageError(std::string(mpiImplName(job.impl)) +
                         " requires the same number of slots on every host (-ppn); got " + join(hostItems, ","));
      }
    }
    if (job.nics.size() > 1) {
      throw UsageError(std::string(mpiImplName(job.impl)) + " accepts only one network interface (-iface); got " +
                       nics);
    }
    std::vector<std::string> names;
    for (const auto& h : job.hosts) names.push_back(h.host);
    cmd.insert(cmd.end(),
               {"-l", "-np", std::to_string(job.np), "-hosts", join(names, ","), "-ppn", std::to_string(slots)});
    if (!sshArgs.empty()) cmd.insert(cmd.end(), {"-bootstrap=ssh", "-bootstrap-exec-args", shellQuote(sshArgs)});
    if (!job.nics.empty()) {
      cmd.insert(cmd.end(), {"-iface", job.nics[0], "-genv", "NCCL_SOCKET_IFNAME", nics});
    }
    if (o.outputFilename.has_value()) {
      cmd.insert(cmd.end(), {"-outfile-pattern", shellQuote(*o.outputFilename + "/rank.%r/stdout"), "-errfile-pattern",
                             shellQuote(*o.outputFilename + "/rank.%r/stderr")});
    }
  } else {
    if (job.runningAsRoot) cmd.push_back("--allow-run-as-root");
    cmd.insert(cmd.end(), {"--tag-output", "-np", std::to_string(job.np), "-H", join(hostItems, ",")});
    if (o.bindingArgs.has_value()) {
      cmd.push_back(*o.bindingArgs);
    } else if (job.impl == MpiImpl::kSpectrum) {
      cmd.insert(cmd.end(), {"-bind-to", "socket", "-map-by", "socket", "-rank-by", "core"});
    } else {
      cmd.insert(cmd.end(), {"-bind-to", "none", "-map-by", "slot"});
    }
    if (job.impl == MpiImpl::kOpenMpi) cmd.insert(cmd.end(), {"-mca", "pml", "ob1", "-mca", "btl", "^openib"});
    if (job.impl == MpiImpl::kSpectrum && o.tcp) cmd.push_back("-tcp");
    if (job.hosts.size() >= 64) {
      cmd.insert(cmd.end(), {"-mca", "plm_rsh_no_tree_spawn", "true", "-mca", "plm_rsh_num_concurrent",
                             std::to_string(job.hosts.size())});
    }
    if (!sshArgs.empty()) cmd.insert(cmd.end(), {"-mca", "plm_rsh_args", shellQuote(sshArgs)});
    if (!job.nics.empty()) {
      cmd.insert(cmd.end(), {"-mca", "btl_tcp_if_include", nics, "-x", "NCCL_SOCKET_IFNAME=" + nics});
    }
    if (o.outputFilename.has_value()) cmd.insert(cmd.end(), {"--output-filename", shellQuote(*o.outputFilename)});
    if (o.prefixOutputWithTimestamp) cmd.push_back("--timestamp-output");
    for (const auto& [k, v] : job.environment) {
      if (validName(k) && !isExcludedName(k)) cmd.insert(cmd.end(), {"-x", k});
    }
    // The secret is in mpirun's environment (never on its command line); export it by name.
    if (job.environment.count(kSecretEnv) > 0) cmd.insert(cmd.end(), {"-x", kSecretEnv});
  }
  if (o.mpiArgs.has_value()) cmd.push_back(*o.mpiArgs);
  for (const auto& arg : o.command) cmd.push_back(shellQuote(arg));
  return join(cmd, " ");
}

int runMpirun(const std::string& command, const EnvMap& environment, int signalFd) {
  SpawnRequest request;
  request.path = "/bin/sh";
  request.argv = {"/bin/sh", "-c", command};
  request.env = renderEnvironment({&environment});
  request.inheritStdio = true;
  // mpirun stays in the launcher's process group: it reads the terminal (stdin forwarding to
  // rank 0), which a background process group may not do.
  request.newProcessGroup = false;
  return waitForegroundChild(spawnProcess(request).pid, signalFd);
}

}  // namespace hvd::launcher
