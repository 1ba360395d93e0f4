#include "spawn_local.h"

#include <unistd.h>

#include <iostream>

#include "process.h"

namespace hvd::launcher {

void attachForwarders(WorkerProcess& worker, const JobContext& job) {
  int outFile = -1, errFile = -1;
  if (job.outputDir.has_value()) {
    outFile = openRankOutputFile(*job.outputDir, worker.slot.rank, job.np, false);
    errFile = openRankOutputFile(*job.outputDir, worker.slot.rank, job.np, true);
  }
  worker.out = std::make_unique<LineForwarder>(worker.slot.rank, false, 1, outFile, job.timestampOutput);
  worker.err = std::make_unique<LineForwarder>(worker.slot.rank, true, 2, errFile, job.timestampOutput);
}

WorkerProcess spawnLocalWorker(const JobContext& job, const SlotInfo& slot) {
  EnvMap slotEnv = slotEnvironment(slot);
  EnvMap secret = {{kSecretEnv, job.secret}};
  SpawnRequest request;
  request.path = job.localExecutable;
  request.argv = job.command;
  request.env = renderEnvironment({&job.environment, &slotEnv, &secret});
  if (job.verbose) {
    std::string line = "horovodrun: starting rank " + std::to_string(slot.rank) + " on " + slot.hostname + ":";
    for (const auto& [k, v] : slotEnv) line += " " + k + "=" + v;
    for (const auto& a : job.command) line += " " + a;
    line += "\n";
    writeAll(2, line.data(), line.size());
  }
  WorkerProcess worker;
  worker.slot = slot;
  attachForwarders(worker, job);
  SpawnedProcess p = spawnProcess(request);
  worker.pid = p.pid;
  worker.stdoutFd = p.stdoutFd;
  worker.stderrFd = p.stderrFd;
  return worker;
}

}  // namespace hvd::launcher
