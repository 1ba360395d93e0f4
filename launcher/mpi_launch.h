// --mpi: delegate the job to mpirun. The implementation (Open MPI, MPICH,
// Intel MPI, Spectrum MPI) is detected from `mpirun --version`; the command line is built with
// that implementation's flags and run as /bin/sh -c "<mpirun ...>" in its own process group,
// with the launcher's environment plus the flag-derived knobs (exported with -x for Open MPI).
// Output tagging is mpirun's (--tag-output / -l).
//
// Unlike Horovod, which execs the shell, the launcher stays alive as mpirun's parent so the
// rendezvous server keeps running (its address and the job secret are exported too, for a
// core that bootstraps over the store under mpirun). The exit status is still mpirun's
// (128 + signal if it was killed); SIGINT/SIGTERM/SIGHUP are forwarded to mpirun.
#pragma once

#include <string>
#include <vector>

#include "env.h"
#include "hosts.h"
#include "options.h"

namespace hvd::launcher {

enum class MpiImpl { kOpenMpi, kSpectrum, kMpich, kIntel, kUnknown, kMissing };

// Runs `mpirun --version` (bounded by a few seconds) and classifies its output.
MpiImpl detectMpi(const std::string& mpirunPath);
const char* mpiImplName(MpiImpl impl);

struct MpiJob {
  MpiImpl impl = MpiImpl::kOpenMpi;
  int np = 0;
  std::vector<HostSlots> hosts;
  std::vector<std::string> nics;
  EnvMap environment;  // what mpirun runs with (and, for Open MPI, exports with -x)
  bool runningAsRoot = false;
};

// The shell command line (exposed for tests and --verbose). Throws UsageError for MPICH/Intel
// with unequal slots per host or more than one interface.
std::string buildMpirunCommand(const Options& options, const MpiJob& job);

// Runs the command and returns the launcher's exit code.
int runMpirun(const std::string& command, const EnvMap& environment, int signalFd);

}  // namespace hvd::launcher
