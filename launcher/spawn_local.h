// Starting a worker on this machine: fork/exec of the command (resolved on PATH beforehand)
// in its own process group, with the job environment, the slot's topology and the secret in
// its environment (never on a command line), stdin from /dev/null, stdout/stderr piped to the
// supervisor.
#pragma once

#include "worker.h"

namespace hvd::launcher {

// Throws hvd::Error if the process cannot be started.
WorkerProcess spawnLocalWorker(const JobContext& job, const SlotInfo& slot);

}  // namespace hvd::launcher
