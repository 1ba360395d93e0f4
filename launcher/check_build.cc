#include "check_build.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "common/deadline.h"
#include "env.h"
#include "process.h"

namespace hvd::launcher {
namespace {

// Probes may import torch, which takes seconds on a cold cache.
constexpr auto kProbeTimeout = std::chrono::seconds(120);

std::string pathEnv() {
  const char* p = std::getenv("PATH");
  return p != nullptr ? p : "/usr/local/bin:/usr/bin:/bin";
}

struct ProbeResult {
  bool ok = false;
  std::string output;  // stdout and stderr together
};

// Runs `python3 -c <code>` for each snippet concurrently; ok where it exited 0.
std::vector<ProbeResult> runPythonProbes(const std::vector<std::string>& snippets) {
  std::string python = pythonInterpreter();
  std::vector<ProbeResult> ok(snippets.size());
  if (python.empty()) return ok;
  struct Probe {
    SpawnedProcess p;
    bool done = false;
  };
  std::vector<Probe> probes;
  EnvMap own = inheritedEnvironment();
  for (const auto& code : snippets) {
    SpawnRequest request;
    request.path = python;
    request.argv = {python, "-c", code};
    request.env = renderEnvironment({&own});
    request.mergeStderr = true;
    Probe probe;
    try {
      probe.p = spawnProcess(request);
    } catch (const Error&) {
      probe.done = true;
    }
    probes.push_back(probe);
  }
  Deadline deadline = Deadline::after(kProbeTimeout);
  while (true) {
    bool pending = false;
    std::vector<pollfd> fds;
    for (auto& pr : probes) {
      if (pr.done) continue;
      pending = true;
      if (pr.p.stdoutFd >= 0) fds.push_back({pr.p.stdoutFd, POLLIN, 0});
    }
    if (!pending || deadline.expired()) break;
    poll(fds.data(), fds.size(), deadline.pollTimeoutMs(50));
    for (size_t i = 0; i < probes.size(); ++i) {
      auto& pr = probes[i];
      if (pr.done) continue;
      char buf[4096];
      while (pr.p.stdoutFd >= 0) {
        ssize_t n = read(pr.p.stdoutFd, buf, sizeof(buf));
        if (n > 0) {
          ok[i].output.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n < 0 && errno == EAGAIN) break;
        close(pr.p.stdoutFd);
        pr.p.stdoutFd = -1;
      }
      int status = 0;
      if (waitpid(pr.p.pid, &status, WNOHANG) == pr.p.pid) {
        pr.done = true;
        ok[i].ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
    }
  }
  for (auto& pr : probes) {
    if (pr.p.stdoutFd >= 0) close(pr.p.stdoutFd);
    if (!pr.done && pr.p.pid > 0) {
      kill(-pr.p.pid, SIGKILL);
      waitpid(pr.p.pid, nullptr, 0);
    }
  }
  return ok;
}

}  // namespace

std::string pythonInterpreter() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    std::string sibling = resolveExecutable(dir + "/python3", "");
    if (!sibling.empty()) return sibling;
  }
  return resolveExecutable("python3", pathEnv());
}

namespace {

// Prints what the CUDA backend was built with and what loading it finds here, one key=value a line.
constexpr const char* kCudaProbe =
    "from horovod import _core\n"
    "print('cuda_built=%d' % bool(_core.cuda_built()))\n"
    "print('nccl_built=%d' % _core.nccl_built())\n"
    "if _core.cuda_built():\n"
    "    for k, v in _core.cuda_libraries().items(): print('%s=%s' % (k, v.replace('\\n', ' ')))\n";

// "2.32.3" for NCCL's version code 23203 (2.8.4 for 2804).
std::string ncclVersionText(int code) {
  if (code < 10000)
    return std::to_string(code / 1000) + "." + std::to_string(code / 100 % 10) + "." + std::to_string(code % 100);
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

}  // namespace

BuildInfo probeBuild() {
  BuildInfo info;
  auto ok = runPythonProbes({"import torch, horovod._core", "import horovod.tensorflow",
                             "from horovod import _core; assert _core.mpi_built()", kCudaProbe});
  info.pytorch = ok[0].ok;
  info.tensorflow = ok[1].ok;
  // MPI plugins built (horovod.mpi_built()): jobs under mpirun/mpiexec rendezvous through MPI,
  // HOROVOD_CONTROLLER=mpi is accepted, and HOROVOD_CPU_OPERATIONS=mpi runs the collectives through
  // MPI (the plugin carries both).
  info.mpiController = ok[2].ok;
  info.mpiOps = ok[2].ok;
  if (ok[3].ok) {
    std::stringstream lines(ok[3].output);
    std::string line;
    while (std::getline(lines, line)) {
      size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string key = line.substr(0, eq), value = line.substr(eq + 1);
      if (key == "nccl_built") info.ncclVersion = std::atoi(value.c_str());
      if (key == "cuda_built") info.cuda = value == "1";
      if (key == "runtime") info.cudaRuntime = value;
      if (key == "nccl") info.ncclLibrary = value;
      if (key == "error") info.cudaError = value;
      if (key == "nccl_error") info.ncclError = value;
    }
  }
  // NCCL operations are built with the CUDA backend (nccl_built() is the NCCL version code of its
  // headers); whether this machine can load NCCL is the note's business.
  info.ncclOps = info.ncclVersion > 0;
  info.mpirun = resolveExecutable("mpirun", pathEnv());
  return info;
}

std::string formatBuildInfo(const BuildInfo& info) {
  auto mark = [](bool on) { return on ? "    [X] " : "    [ ] "; };
  std::string out = "Horovod v0.28.1:\n\n";
  out += "Available Frameworks:\n";
  out += mark(info.tensorflow) + std::string("TensorFlow\n");
  out += mark(info.pytorch) + std::string("PyTorch\n");
  out += mark(info.mxnet) + std::string("MXNet\n");
  out += "\nAvailable Controllers:\n";
  out += mark(info.mpiController) + std::string("MPI\n");
  out += mark(info.glooController) + std::string("Gloo\n");
  out += "\nAvailable Tensor Operations:\n";
  out += mark(info.ncclOps) + std::string("NCCL\n");
  out += mark(info.ddlOps) + std::string("DDL\n");
  out += mark(info.cclOps) + std::string("CCL\n");
  out += mark(info.mpiOps) + std::string("MPI\n");
  out += mark(info.glooOps) + std::string("Gloo\n");
  if (info.cuda) {
    out += "\nCUDA is built into this Horovod, NCCL " + ncclVersionText(info.ncclVersion) +
           " (horovod.nccl_built() = " + std::to_string(info.ncclVersion) +
           "). Loaded at run time, on this machine:\n  CUDA runtime: " +
           (info.cudaError.empty() ? info.cudaRuntime : "not usable: " + info.cudaError) +
           "\n  NCCL: " + (info.ncclError.empty() ? info.ncclLibrary : "not usable: " + info.ncclError) + "\n";
  }
  if (info.mpiController) {
    out +=
        "\nMPI starts jobs run under plain mpirun/mpiexec (or HOROVOD_CONTROLLER=mpi): it places the\n"
        "ranks and carries the rendezvous. Data plane, per process set:\n"
        "  default (HOROVOD_CPU_OPERATIONS unset or gloo): Horovod's own channel, shared memory\n"
        "    between ranks of a host (one copy, ranks reduce each other's slices in place) and TCP\n"
        "    across hosts, as under horovodrun; measured faster than MPI's on one host (docs/mpi.md);\n"
        "  HOROVOD_CPU_OPERATIONS=mpi: MPI's own collectives, on one MPI communicator per process\n"
        "    set (needs a job that MPI started). HOROVOD_LOG_LEVEL=debug logs the choice per set.\n"
        "The negotiation always runs over Horovod's channel.\n";
  } else if (!info.mpirun.empty()) {
    // Launching through mpirun and being built with MPI are different things; say which holds.
    out +=
        "\nMPI is not built into this Horovod (horovod.mpi_built() is False). horovodrun --mpi\n"
        "can still start the processes with " +
        info.mpirun +
        "; they then use Horovod's\n"
        "built-in controller (Gloo above) and its CPU operations, not MPI.\n";
  }
  return out;
}

}  // namespace hvd::launcher
