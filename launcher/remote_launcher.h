// How horovodrun's own launcher (static and elastic jobs) starts a worker on a remote host.
//
// By default with ssh (spawn_ssh.h). Inside an IBM LSF job (LSB_JOBID set) with LSF's `blaunch`
// on PATH, with `blaunch <host> <command>` instead: LSF's sanctioned remote launcher, which runs
// the task under the job's control on a host of the allocation (ssh between LSF hosts is often
// blocked). The command is the one ssh would run (a single shell string); the job secret reaches
// it on stdin, which blaunch forwards as ssh does (without its -n), and the launcher stops the
// worker by closing that stdin, as with ssh.
//
// `--remote-launcher ssh|blaunch` chooses explicitly. Without it, -p/--ssh-port or
// -i/--ssh-identity-file keep ssh inside LSF too. Whenever the job runs inside LSF and has remote
// hosts, the choice and how to change it are said on stderr.
#pragma once

#include <string>

#include "env.h"
#include "options.h"
#include "worker.h"

namespace hvd::launcher {

struct RemoteLauncherChoice {
  std::string blaunchPath;  // non-empty: blaunch; else ssh
  std::string note;         // the line to say on stderr (empty outside LSF when ssh was not asked for)
};

// The launcher for remote workers given the options, the environment (LSB_JOBID) and PATH.
// UsageError: --remote-launcher blaunch outside an LSF job or without blaunch on PATH.
RemoteLauncherChoice chooseRemoteLauncher(const Options& options, const EnvMap& env, const std::string& path);

// Sets job.blaunchPath or job.sshPath as chosen (UsageError when ssh is needed and not on PATH)
// and says the choice's note on stderr.
void setRemoteLauncher(JobContext& job, const Options& options);

}  // namespace hvd::launcher
