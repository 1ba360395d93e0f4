// One worker of the job as the supervisor sees it: a local child process (the worker itself,
// or the ssh client that runs it on a remote host), in its own process group, with its output
// pipes. Spawners (spawn_local.h, spawn_ssh.h) create them; the Supervisor owns them.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "env.h"
#include "hosts.h"
#include "output.h"

namespace hvd::launcher {

struct WorkerProcess {
  SlotInfo slot;       // where it started (elastic workers move between rounds: see elastic_driver.h)
  int elasticId = -1;  // elastic jobs: the worker's id in the elastic rendezvous
  pid_t pid = -1;      // process group id too
  bool remote = false;
  int stdoutFd = -1;   // read ends, non-blocking; -1 once the stream ended
  int stderrFd = -1;
  // ssh workers: write end of the ssh client's stdin. The remote wrapper terminates the worker
  // when it reads EOF there, so closing this is how a remote worker is told to stop (and it
  // also happens on its own if the launcher dies).
  int stdinFd = -1;
  std::unique_ptr<LineForwarder> out;
  std::unique_ptr<LineForwarder> err;

  bool exited = false;
  int status = 0;  // waitpid status once exited
};

// What every spawner needs to start one worker of the job. Built once in main, read-only.
struct JobContext {
  std::vector<std::string> command;  // as the user gave it
  std::string localExecutable;       // command[0] resolved on PATH (local workers only)
  EnvMap environment;                // inherited + knobs + job variables, without the secret
  std::string secret;                // HOROVOD_SECRET_KEY
  std::string cwd;                   // remote workers cd here first
  // Remote workers pick the interface that routes to the rendezvous address on their own host
  // instead of the launcher's interface name (set when the interface was auto-detected).
  bool remoteInterfaceFromRoute = false;
  std::optional<std::string> outputDir;
  bool timestampOutput = false;
  bool verbose = false;
  int np = 0;
  // How remote workers start (remote_launcher.h): blaunch when blaunchPath is set, else ssh.
  std::string blaunchPath;           // resolved LSF blaunch
  std::string sshPath;               // resolved ssh client
  std::optional<int> sshPort;
  std::optional<std::string> sshIdentityFile;
};

// Creates the worker's line forwarders (and per-rank files with --output-filename).
void attachForwarders(WorkerProcess& worker, const JobContext& job);

}  // namespace hvd::launcher
