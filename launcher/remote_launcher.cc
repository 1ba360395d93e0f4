#include "remote_launcher.h"

#include <cstdlib>

#include "process.h"

namespace hvd::launcher {

RemoteLauncherChoice chooseRemoteLauncher(const Options& o, const EnvMap& env, const std::string& path) {
  auto job = env.find("LSB_JOBID");
  const std::string lsfJob = job == env.end() ? "" : job->second;
  const std::string asked = o.remoteLauncher.value_or("");
  if (asked == "ssh") return {};
  std::string blaunch = lsfJob.empty() && asked.empty() ? "" : resolveExecutable("blaunch", path);
  if (asked == "blaunch") {
    if (lsfJob.empty()) {
      throw UsageError(
          "--remote-launcher blaunch: blaunch starts tasks only inside an LSF job, and LSB_JOBID is "
          "not set");
    }
    if (blaunch.empty())
      throw UsageError("--remote-launcher blaunch: LSF job " + lsfJob + ", but blaunch is not on PATH");
    return {blaunch, "horovodrun: starting remote workers with blaunch (LSF job " + lsfJob + ")\n"};
  }
  if (blaunch.empty()) return {};
  if (o.sshPort.has_value() || o.sshIdentityFile.has_value()) {
    return {"", "horovodrun: inside LSF job " + lsfJob +
                    ": starting remote workers with ssh, as --ssh-port/--ssh-identity-file ask "
                    "(--remote-launcher blaunch uses LSF's blaunch)\n"};
  }
  return {blaunch, "horovodrun: inside LSF job " + lsfJob +
                       " with blaunch on PATH: starting remote workers with blaunch (--remote-launcher ssh keeps "
                       "ssh)\n"};
}

void setRemoteLauncher(JobContext& job, const Options& options) {
  const char* path = std::getenv("PATH");
  const std::string pathText = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  RemoteLauncherChoice choice = chooseRemoteLauncher(options, inheritedEnvironment(), pathText);
  if (choice.blaunchPath.empty()) {
    job.sshPath = resolveExecutable("ssh", pathText);
    if (job.sshPath.empty()) throw UsageError("ssh not found on PATH; it is needed to start workers on remote hosts");
  }
  job.blaunchPath = choice.blaunchPath;
  writeAll(2, choice.note.data(), choice.note.size());
}

}  // namespace hvd::launcher
