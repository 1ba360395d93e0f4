// --check-build: Horovod's build summary, from what this installation can actually do:
//   PyTorch    [X] iff python3 imports both torch and horovod._core
//   TensorFlow [X] iff python3 imports horovod.tensorflow; MXNet [ ]
//   Controllers: Gloo [X] (the built-in controller answers to that name), MPI [X] iff mpirun is
//     on PATH (--mpi delegates to it)
//   Tensor operations: Gloo [X]; MPI [X] only with an MPI transport in the build; NCCL, DDL,
//     CCL [ ].
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
};

BuildInfo probeBuild();
std::string formatBuildInfo(const BuildInfo& info);

// The Python interpreter used for probes (see above).
std::string pythonInterpreter();

}  // namespace hvd::launcher
