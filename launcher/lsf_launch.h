// --jsrun: a job inside an IBM LSF allocation, started by LSF's jsrun.
//
// LSF is detected by LSB_JOBID. The allocation's hosts come from LSB_MCPU_HOSTS ("h1 n1 h2 n2
// ...", a host and its slots, i.e. cores) or else LSB_HOSTS (one name per slot). As in Horovod,
// the first host is the launch node that runs the batch script and gets no ranks, unless it is
// the only host. -H / -hostfile replace the allocation's hosts; -np defaults to their slots.
//
// The job runs as `jsrun --erf_input <rankfile> [--stdio_stdout F --stdio_stderr F]
// [--smpiargs "<--mpi-args>"] <command>`: the rankfile places ranks on the hosts in order, each
// host's slots filled consecutively, and gives each rank a contiguous block of the host's
// (logical) cores, slots / ranks on the host, and every GPU. jsrun starts the ranks with the
// launcher's environment (the knobs and the rendezvous address horovodrun adds), and each rank
// takes its rank and size from jsrun's OMPI_COMM_WORLD_* variables. The launcher stays jsrun's
// parent (serving the rendezvous) and exits with jsrun's status.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env.h"
#include "hosts.h"
#include "options.h"

namespace hvd::launcher {

struct LsfAllocation {
  std::string jobId;             // LSB_JOBID
  std::vector<HostSlots> hosts;  // compute hosts (the launch node left out), slots = cores
};

// The LSF job this process runs in, read from `env`; nullopt when LSB_JOBID is unset. No hosts
// when neither LSB_MCPU_HOSTS nor LSB_HOSTS is set; UsageError when LSB_MCPU_HOSTS is malformed.
std::optional<LsfAllocation> detectLsf(const EnvMap& env);

// jsrun's explicit resource file for `np` ranks on `hosts` (slots = cores of the host).
std::string jsrunRankfile(const std::vector<HostSlots>& hosts, int np);

// jsrun's argument vector (argv[0] = `jsrun`, the path to run).
std::vector<std::string> jsrunArguments(const Options& options, const std::string& jsrun,
                                        const std::string& rankfilePath);

// Runs the job (see above); returns the launcher's exit code.
int runJsrunJob(const Options& options, const LsfAllocation& lsf, int signalFd);

}  // namespace hvd::launcher
