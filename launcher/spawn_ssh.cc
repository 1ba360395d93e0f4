#include "spawn_ssh.h"

#include <unistd.h>

#include <cctype>

#include "process.h"

namespace hvd::launcher {
namespace {

// Runs on the remote host as: /bin/sh -c '<this>' horovod-worker <command...>
// See spawn_ssh.h for what it does and why.
constexpr const char* kRemoteWrapper =
    "IFS= read -r HOROVOD_SECRET_KEY || exit 97\n"
    "export HOROVOD_SECRET_KEY\n"
    // Interface auto-detection on this host: the one routing to the launcher (see spawn_ssh.h).
    "if [ -n \"${HOROVOD_IFACE_FROM_ROUTE:-}\" ]; then\n"
    "  unset HOROVOD_IFACE_FROM_ROUTE\n"
    "  i=$(ip -o route get \"$HOROVOD_GLOO_RENDEZVOUS_ADDR\" 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')\n"
    "  if [ -n \"$i\" ]; then export HOROVOD_GLOO_IFACE=\"$i\" NCCL_SOCKET_IFNAME=\"$i\"; fi\n"
    "fi\n"
    "exec 3<&0 </dev/null\n"
    "if command -v setsid >/dev/null 2>&1; then setsid \"$@\" 3<&- & else \"$@\" 3<&- & fi\n"
    "c=$!\n"
    "( read -r _ <&3; kill -TERM -$c 2>/dev/null || kill -TERM $c; kill -CONT -$c 2>/dev/null || kill -CONT $c;"
    " sleep 5;"
    " kill -KILL -$c 2>/dev/null || kill -KILL $c ) >/dev/null 2>&1 &\n"
    "w=$!\n"
    "wait $c 2>/dev/null; r=$?\n"
    "kill $w 2>/dev/null\n"
    "exit $r\n";

bool validName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

std::string shellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<std::string> sshBaseArgs(const JobContext& job) {
  std::vector<std::string> args = {
      job.sshPath, "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"};
  if (job.sshPort.has_value()) {
    args.push_back("-p");
    args.push_back(std::to_string(*job.sshPort));
  }
  if (job.sshIdentityFile.has_value()) {
    args.push_back("-i");
    args.push_back(*job.sshIdentityFile);
  }
  return args;
}

std::string remoteCommand(const JobContext& job, const SlotInfo& slot) {
  EnvMap slotEnv = slotEnvironment(slot);
  std::string cmd = "cd " + shellQuote(job.cwd) + " >/dev/null 2>&1 ; exec env";
  for (const auto& [k, v] : job.environment) {
    if (!validName(k) || slotEnv.count(k) > 0) continue;
    if (job.remoteInterfaceFromRoute && (k == "HOROVOD_GLOO_IFACE" || k == "NCCL_SOCKET_IFNAME")) continue;
    cmd += " " + k + "=" + shellQuote(v);
  }
  if (job.remoteInterfaceFromRoute) cmd += " HOROVOD_IFACE_FROM_ROUTE=1";
  for (const auto& [k, v] : slotEnv) cmd += " " + k + "=" + shellQuote(v);
  cmd += " /bin/sh -c " + shellQuote(kRemoteWrapper) + " horovod-worker";
  for (const auto& arg : job.command) cmd += " " + shellQuote(arg);
  return cmd;
}

WorkerProcess spawnRemoteWorker(const JobContext& job, const SlotInfo& slot) {
  SpawnRequest request;
  const bool blaunch = !job.blaunchPath.empty();
  request.path = blaunch ? job.blaunchPath : job.sshPath;
  request.argv = blaunch ? std::vector<std::string>{job.blaunchPath} : sshBaseArgs(job);
  request.argv.push_back(slot.hostname);
  std::string remote = remoteCommand(job, slot);
  request.argv.push_back(remote);
  // The client itself runs with the launcher's environment (SSH_AUTH_SOCK, LSF's LSB_*).
  EnvMap own = inheritedEnvironment();
  request.env = renderEnvironment({&own});
  request.stdinPipe = true;
  if (job.verbose) {
    std::string line = "horovodrun: starting rank " + std::to_string(slot.rank) + " on " + slot.hostname + ":";
    for (size_t i = 0; i + 1 < request.argv.size(); ++i) line += " " + request.argv[i];
    line += " " + shellQuote(remote) + "\n";
    writeAll(2, line.data(), line.size());
  }
  WorkerProcess worker;
  worker.slot = slot;
  worker.remote = true;
  attachForwarders(worker, job);
  SpawnedProcess p = spawnProcess(request);
  worker.pid = p.pid;
  worker.stdoutFd = p.stdoutFd;
  worker.stderrFd = p.stderrFd;
  worker.stdinFd = p.stdinFd;
  // The first line is the secret; after that the pipe stays open and silent until the worker
  // should stop. 65 bytes fit in any pipe buffer, so this cannot block.
  std::string line = job.secret + "\n";
  writeAll(worker.stdinFd, line.data(), line.size());
  return worker;
}

}  // namespace hvd::launcher
