// --check-build: Horovod's build summary, from what this installation can actually do:
//   PyTorch    [X] iff python3 imports both torch and horovod._core
//   TensorFlow [X] iff python3 imports horovod.tensorflow; MXNet [ ]
//   Controllers: Gloo [X] (the built-in controller answers to that name); MPI [X] iff
//     horovod._core's mpi_built() (MPI plugins built: jobs under mpirun rendezvous through MPI, and
//     a note after the table says which data plane runs and why)
//   Tensor operations: Gloo [X]; MPI as the controller; NCCL [X] iff horovod._core's
//     nccl_built() (the CUDA backend was compiled, against NCCL's headers), and then a note after
//     the table says what loading the CUDA runtime and NCCL finds on this machine; DDL, CCL [ ].
// Launching with mpirun is a different thing: --mpi delegates to mpirun whenever it is on PATH,
// and the processes then use the built-in controller. When MPI is not built but mpirun is
// found, a note after the table says so.
// python3 is the interpreter next to the horovodrun executable if there is one (a venv),
// else python3 on PATH.
#pragma once

#include <string>

namespace hvd::launcher {

struct BuildInfo {
  bool tensorflow = false;
  bool pytorch = false;
  bool mxnet = false;
  bool mpiController = false;
  bool glooController = true;
  bool ncclOps = false;
  bool ddlOps = false;
  bool cclOps = false;
  bool mpiOps = false;
  bool glooOps = true;
  std::string mpirun;  // mpirun's path if it is on PATH (horovodrun --mpi can use it), else ""
  // horovod._core's cuda_built() / nccl_built(), and what its cuda_libraries() found here.
  bool cuda = false;
  int ncclVersion = 0;
  std::string cudaRuntime, cudaError, ncclLibrary, ncclError;
};

BuildInfo probeBuild();
std::string formatBuildInfo(const BuildInfo& info);

// The Python interpreter used for probes (see above).
std::string pythonInterpreter();

}  // namespace hvd::launcher
