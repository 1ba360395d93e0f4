// An MPI plugin: the table of plugin_api.h over one MPI implementation. Compiled once per MPI
// found at build time (cpp/mpi/CMakeLists.txt), with that MPI's mpi.h, into
// libhorovod_mpi_<flavor>.so; HVD_MPI_FLAVOR names the flavor. Uses no other part of the core.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mpi/plugin_api.h"

namespace {

void describe(int code, const char* what, char* err, int errLen) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "error %d", code);
  std::snprintf(err, static_cast<size_t>(errLen), "%s failed: %s", what, text);
}

// Runs an MPI call; on failure fills err and returns from the enclosing function.
#define HVD_MPI_TRY(call)                         \
  do {                                            \
    int hvdCode = (call);                         \
    if (hvdCode != MPI_SUCCESS) {                 \
      describe(hvdCode, #call, err, errLen);      \
      return 1;                                   \
    }                                             \
  } while (0)

// The communicator behind a Fortran handle; MPI_COMM_NULL is refused with an error saying why.
int toComm(int64_t handle, MPI_Comm* comm, char* err, int errLen) {
  if (handle == HVD_MPI_WORLD_COMM) {
    *comm = MPI_COMM_WORLD;
    return 0;
  }
  *comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  if (*comm == MPI_COMM_NULL) {
    std::snprintf(err, static_cast<size_t>(errLen),
                  "the MPI communicator is MPI_COMM_NULL: this process is not a member of it (call hvd.init(comm=...) "
                  "only on the processes of the communicator)");
    return 1;
  }
  return 0;
}

void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int libraryVersion(char* out, int outLen) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return 1;
  // First line only: MPICH prints its whole configuration after it.
  char* newline = std::strchr(text, '\n');
  if (newline != nullptr) *newline = '\0';
  std::snprintf(out, static_cast<size_t>(outLen), "%s", text);
  return 0;
}

int levelIndex(int level) {
  if (level == MPI_THREAD_MULTIPLE) return 3;
  if (level == MPI_THREAD_SERIALIZED) return 2;
  if (level == MPI_THREAD_FUNNELED) return 1;
  return 0;
}

int init(int threadsDisable, int* provided, int* initializedHere, char* err, int errLen) {
  int initialized = 0, finalized = 0;
  HVD_MPI_TRY(MPI_Initialized(&initialized));
  HVD_MPI_TRY(MPI_Finalized(&finalized));
  if (finalized) {
    std::snprintf(err, static_cast<size_t>(errLen),
                  "MPI has already been finalized in this process; Horovod cannot be re-initialized over MPI");
    return 1;
  }
  int level = 0;
  *initializedHere = 0;
  if (initialized) {
    HVD_MPI_TRY(MPI_Query_thread(&level));
  } else {
    HVD_MPI_TRY(MPI_Init_thread(nullptr, nullptr, threadsDisable ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE, &level));
    *initializedHere = 1;
    // MPI requires MPI_Finalize before exit (Open MPI's mpirun reports the job as failed
    // otherwise). Registered now, so it runs after the core's own at-exit shutdown, which is
    // registered later.
    std::atexit(finalizeAtExit);
  }
  *provided = levelIndex(level);
  return 0;
}

int rankSize(int64_t handle, int* rank, int* size, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  HVD_MPI_TRY(MPI_Comm_rank(comm, rank));
  HVD_MPI_TRY(MPI_Comm_size(comm, size));
  return 0;
}

int placement(int64_t handle, int* localRank, int* localSize, int* crossRank, int* crossSize, char* err,
              int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  int rank = 0;
  HVD_MPI_TRY(MPI_Comm_rank(comm, &rank));
  MPI_Comm local, cross;
  HVD_MPI_TRY(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  HVD_MPI_TRY(MPI_Comm_rank(local, localRank));
  HVD_MPI_TRY(MPI_Comm_size(local, localSize));
  HVD_MPI_TRY(MPI_Comm_split(comm, *localRank, rank, &cross));
  HVD_MPI_TRY(MPI_Comm_rank(cross, crossRank));
  HVD_MPI_TRY(MPI_Comm_size(cross, crossSize));
  MPI_Comm_free(&cross);
  MPI_Comm_free(&local);
  return 0;
}

int broadcast(int64_t handle, void* data, int bytes, int root, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  HVD_MPI_TRY(MPI_Bcast(data, bytes, MPI_BYTE, root, comm));
  return 0;
}

const HvdMpiPlugin kPlugin = {HVD_MPI_PLUGIN_ABI, HVD_MPI_FLAVOR, libraryVersion, init, rankSize, placement, broadcast};

}  // namespace

extern "C" __attribute__((visibility("default"))) const HvdMpiPlugin* hvd_mpi_plugin(void) { return &kPlugin; }
