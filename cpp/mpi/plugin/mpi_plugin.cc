// An MPI plugin: the table of plugin_api.h over one MPI implementation. Compiled once per MPI
// found at build time (cpp/mpi/CMakeLists.txt), with that MPI's mpi.h, into
// libhorovod_mpi_<flavor>.so; HVD_MPI_FLAVOR names the flavor. Uses no other part of the core.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <time.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mpi/plugin_api.h"

namespace {

void describe(int code, const char* what, char* err, int errLen) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "error %d", code);
  std::snprintf(err, static_cast<size_t>(errLen), "%s failed: %s", what, text);
}

// Runs an MPI call; on failure fills err and returns from the enclosing function.
#define HVD_MPI_TRY(call)                    \
  do {                                       \
    int hvdCode = (call);                    \
    if (hvdCode != MPI_SUCCESS) {            \
      describe(hvdCode, #call, err, errLen); \
      return 1;                              \
    }                                        \
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

// Set when a bounded bootstrap broadcast gave up with requests still pending: MPI_Finalize would
// wait for them, so the process exits without it.
bool abandoned = false;

void finalizeAtExit() {
  if (abandoned) return;
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

int init(int wanted, int* provided, int* initializedHere, char* err, int errLen) {
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
    static const int kLevels[] = {MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE};
    const int required = kLevels[wanted < 0 ? 0 : wanted > 3 ? 3 : wanted];
    HVD_MPI_TRY(MPI_Init_thread(nullptr, nullptr, required, &level));
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

int placement(int64_t handle, int* localRank, int* localSize, int* crossRank, int* crossSize, char* err, int errLen) {
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

// ---- bounded bootstrap broadcast ----

constexpr int kArrivalTag = 0x4876;  // "Hv": the arrival reports of rendezvousBroadcast

double nowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void pause() {
  timespec ts{0, 200 * 1000};  // 200 us: a bootstrap step, not a hot path
  nanosleep(&ts, nullptr);
}

int rendezvousBroadcast(int64_t handle, void* data, int bytes, int root, int64_t timeoutMs, int* missing,
                        int missingCap, int* missingCount, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  int rank = 0, size = 1;
  HVD_MPI_TRY(MPI_Comm_rank(comm, &rank));
  HVD_MPI_TRY(MPI_Comm_size(comm, &size));
  // The other ranks wait 5 s longer than root: when root is there to name the missing ranks, it
  // fails first (a launcher may kill the whole job as soon as one rank fails).
  const double deadline = nowSeconds() + static_cast<double>(timeoutMs) / 1000.0 + (rank == root ? 0.0 : 5.0);
  *missingCount = 0;
  int one = 1;
  MPI_Request sent = MPI_REQUEST_NULL;
  if (rank == root) {
    std::vector<int> reports(static_cast<size_t>(size), 0);
    std::vector<MPI_Request> pending(static_cast<size_t>(size), MPI_REQUEST_NULL);
    for (int p = 0; p < size; ++p) {
      if (p != root) HVD_MPI_TRY(MPI_Irecv(&reports[p], 1, MPI_INT, p, kArrivalTag, comm, &pending[p]));
    }
    for (;;) {
      // One by one: MPI_Testall leaves every request as it was unless all completed, and the
      // ones that did must not be counted as missing.
      bool all = true;
      for (int p = 0; p < size; ++p) {
        if (pending[p] == MPI_REQUEST_NULL) continue;
        int done = 0;
        HVD_MPI_TRY(MPI_Test(&pending[p], &done, MPI_STATUS_IGNORE));
        all = all && done;
      }
      if (all) break;
      if (nowSeconds() > deadline) {
        for (int p = 0; p < size; ++p) {
          if (pending[p] == MPI_REQUEST_NULL) continue;
          if (*missingCount < missingCap) missing[*missingCount] = p;
          ++*missingCount;
          MPI_Cancel(&pending[p]);
          MPI_Request_free(&pending[p]);
        }
        abandoned = true;
        return HVD_MPI_TIMED_OUT;
      }
      pause();
    }
  } else {
    HVD_MPI_TRY(MPI_Isend(&one, 1, MPI_INT, root, kArrivalTag, comm, &sent));
  }
  MPI_Request requests[2] = {MPI_REQUEST_NULL, sent};
  HVD_MPI_TRY(MPI_Ibcast(data, bytes, MPI_BYTE, root, comm, &requests[0]));
  for (;;) {
    int done = 0;
    HVD_MPI_TRY(MPI_Testall(2, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return 0;
    if (nowSeconds() > deadline) {
      *missingCount = -1;
      abandoned = true;
      return HVD_MPI_TIMED_OUT;
    }
    pause();
  }
}

// ---- data plane ----

// hvd::DataType and hvd::ReduceOp values (horovod/types.h), which this file does not include.
enum : int { kUInt8, kInt8, kUInt16, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64, kBool };
enum : int { kOpSum = 1, kOpMin = 3, kOpMax = 4, kOpProduct = 5 };
constexpr int kNumTypes = 11;

HvdMpiReducer reducer = nullptr;
void setReducer(HvdMpiReducer r) { reducer = r; }

// The types MPI-3 cannot reduce get an opaque contiguous type (2 or 1 bytes) and user-defined
// operations that call the core's kernel; created on first use (engine thread).
MPI_Datatype customType[kNumTypes];
bool customMade[kNumTypes] = {};
MPI_Op customOps[6];
bool customOpsMade = false;

int dtypeOf(MPI_Datatype type) {
  for (int t : {kFloat16, kBFloat16, kBool}) {
    if (customMade[t] && customType[t] == type) return t;
  }
  return -1;
}

template <int Op>
void customReduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  const int dtype = dtypeOf(*type);
  if (dtype < 0 || reducer == nullptr) {
    // Cannot happen: only the types made below reach these operations, after setReducer.
    std::fprintf(stderr, "horovod MPI plugin: user-defined reduction on an unknown type\n");
    std::abort();
  }
  reducer(inout, in, *len, dtype, Op);
}

bool isCustom(int dtype) { return dtype == kFloat16 || dtype == kBFloat16 || dtype == kBool; }

int mpiType(int dtype, MPI_Datatype* out, char* err, int errLen) {
  switch (dtype) {
    case kUInt8: *out = MPI_UINT8_T; return 0;
    case kInt8: *out = MPI_INT8_T; return 0;
    case kUInt16: *out = MPI_UINT16_T; return 0;
    case kInt16: *out = MPI_INT16_T; return 0;
    case kInt32: *out = MPI_INT32_T; return 0;
    case kInt64: *out = MPI_INT64_T; return 0;
    case kFloat32: *out = MPI_FLOAT; return 0;
    case kFloat64: *out = MPI_DOUBLE; return 0;
    case kFloat16:
    case kBFloat16:
    case kBool:
      if (!customMade[dtype]) {
        HVD_MPI_TRY(MPI_Type_contiguous(dtype == kBool ? 1 : 2, MPI_BYTE, &customType[dtype]));
        HVD_MPI_TRY(MPI_Type_commit(&customType[dtype]));
        customMade[dtype] = true;
      }
      *out = customType[dtype];
      return 0;
    default: std::snprintf(err, static_cast<size_t>(errLen), "MPI data plane: unknown data type %d", dtype); return 1;
  }
}

int mpiOp(int dtype, int op, MPI_Op* out, char* err, int errLen) {
  if (isCustom(dtype)) {
    if (reducer == nullptr) {
      std::snprintf(err, static_cast<size_t>(errLen), "MPI data plane: no reduction kernel installed");
      return 1;
    }
    if (!customOpsMade) {
      HVD_MPI_TRY(MPI_Op_create(&customReduce<kOpSum>, 1, &customOps[kOpSum]));
      HVD_MPI_TRY(MPI_Op_create(&customReduce<kOpMin>, 1, &customOps[kOpMin]));
      HVD_MPI_TRY(MPI_Op_create(&customReduce<kOpMax>, 1, &customOps[kOpMax]));
      HVD_MPI_TRY(MPI_Op_create(&customReduce<kOpProduct>, 1, &customOps[kOpProduct]));
      customOpsMade = true;
    }
  }
  switch (op) {
    case kOpSum: *out = isCustom(dtype) ? customOps[kOpSum] : MPI_SUM; return 0;
    case kOpMin: *out = isCustom(dtype) ? customOps[kOpMin] : MPI_MIN; return 0;
    case kOpMax: *out = isCustom(dtype) ? customOps[kOpMax] : MPI_MAX; return 0;
    case kOpProduct: *out = isCustom(dtype) ? customOps[kOpProduct] : MPI_PROD; return 0;
    default:
      std::snprintf(err, static_cast<size_t>(errLen), "MPI data plane: reduction %d is not an MPI reduction", op);
      return 1;
  }
}

int typeSize(int dtype) {
  static const int kSizes[kNumTypes] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  return kSizes[dtype];
}

// MPI-3 counts and displacements are ints: byte arrays past 2 GiB are refused with this error.
int intCounts(const int64_t* bytes, int n, std::vector<int>* counts, std::vector<int>* displs, const char* what,
              char* err, int errLen) {
  counts->resize(static_cast<size_t>(n));
  displs->resize(static_cast<size_t>(n));
  int64_t offset = 0;
  for (int p = 0; p < n; ++p) {
    if (bytes[p] > INT_MAX || offset > INT_MAX) {
      std::snprintf(err, static_cast<size_t>(errLen),
                    "MPI data plane: %s of more than 2 GiB exceeds MPI's int counts; use HOROVOD_CPU_OPERATIONS=gloo "
                    "for such tensors",
                    what);
      return 1;
    }
    (*counts)[p] = static_cast<int>(bytes[p]);
    (*displs)[p] = static_cast<int>(offset);
    offset += bytes[p];
  }
  return 0;
}

int allgatherInt(int64_t handle, int value, int* out, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  HVD_MPI_TRY(MPI_Allgather(&value, 1, MPI_INT, out, 1, MPI_INT, comm));
  return 0;
}

int commCreate(int64_t parentHandle, const int* ranks, int n, int tag, int64_t* out, char* err, int errLen) {
  MPI_Comm parent;
  if (toComm(parentHandle, &parent, err, errLen) != 0) return 1;
  MPI_Group all, members;
  HVD_MPI_TRY(MPI_Comm_group(parent, &all));
  HVD_MPI_TRY(MPI_Group_incl(all, n, ranks, &members));
  MPI_Comm made = MPI_COMM_NULL;
  HVD_MPI_TRY(MPI_Comm_create_group(parent, members, tag, &made));
  MPI_Group_free(&members);
  MPI_Group_free(&all);
  if (made == MPI_COMM_NULL) {
    std::snprintf(err, static_cast<size_t>(errLen), "MPI_Comm_create_group: this process is not in the group");
    return 1;
  }
  // Errors come back as codes (the default handler would abort the job without a word of why).
  HVD_MPI_TRY(MPI_Comm_set_errhandler(made, MPI_ERRORS_RETURN));
  *out = static_cast<int64_t>(MPI_Comm_c2f(made));
  return 0;
}

int commFree(int64_t handle, char* err, int errLen) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return 0;  // finalized by its owner (mpi4py) first: nothing left to free
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  HVD_MPI_TRY(MPI_Comm_free(&comm));
  return 0;
}

int allreduce(int64_t handle, const void* in, void* out, int64_t count, int dtype, int op, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  MPI_Datatype type;
  MPI_Op mop;
  if (mpiType(dtype, &type, err, errLen) != 0 || mpiOp(dtype, op, &mop, err, errLen) != 0) return 1;
  const int64_t esize = typeSize(dtype);
  // In chunks of at most INT_MAX elements (MPI-3 counts are ints); every rank has the same count.
  for (int64_t done = 0; done < count;) {
    const int64_t n = count - done < INT_MAX ? count - done : INT_MAX;
    char* dst = static_cast<char*>(out) + done * esize;
    const void* src = in == nullptr ? MPI_IN_PLACE : static_cast<const char*>(in) + done * esize;
    HVD_MPI_TRY(MPI_Allreduce(src, dst, static_cast<int>(n), type, mop, comm));
    done += n;
  }
  return 0;
}

int allgatherv(int64_t handle, const void* in, void* out, const int64_t* recvBytes, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  int rank = 0, size = 1;
  HVD_MPI_TRY(MPI_Comm_rank(comm, &rank));
  HVD_MPI_TRY(MPI_Comm_size(comm, &size));
  std::vector<int> counts, displs;
  if (intCounts(recvBytes, size, &counts, &displs, "an allgather", err, errLen) != 0) return 1;
  // in == NULL: this rank's bytes are already in place in out.
  const void* send = in == nullptr ? MPI_IN_PLACE : in;
  HVD_MPI_TRY(MPI_Allgatherv(send, counts[rank], MPI_BYTE, out, counts.data(), displs.data(), MPI_BYTE, comm));
  return 0;
}

int broadcastBytes(int64_t handle, void* data, int64_t bytes, int root, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  for (int64_t done = 0; done < bytes;) {
    const int64_t n = bytes - done < INT_MAX ? bytes - done : INT_MAX;
    HVD_MPI_TRY(MPI_Bcast(static_cast<char*>(data) + done, static_cast<int>(n), MPI_BYTE, root, comm));
    done += n;
  }
  return 0;
}

int alltoallv(int64_t handle, const void* in, const int64_t* sendBytes, void* out, const int64_t* recvBytes, char* err,
              int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  int size = 1;
  HVD_MPI_TRY(MPI_Comm_size(comm, &size));
  std::vector<int> sc, sd, rc, rd;
  if (intCounts(sendBytes, size, &sc, &sd, "an alltoall", err, errLen) != 0) return 1;
  if (intCounts(recvBytes, size, &rc, &rd, "an alltoall", err, errLen) != 0) return 1;
  HVD_MPI_TRY(MPI_Alltoallv(in, sc.data(), sd.data(), MPI_BYTE, out, rc.data(), rd.data(), MPI_BYTE, comm));
  return 0;
}

int reducescatter(int64_t handle, const void* in, void* out, const int64_t* counts, int dtype, int op, char* err,
                  int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  int size = 1;
  HVD_MPI_TRY(MPI_Comm_size(comm, &size));
  MPI_Datatype type;
  MPI_Op mop;
  if (mpiType(dtype, &type, err, errLen) != 0 || mpiOp(dtype, op, &mop, err, errLen) != 0) return 1;
  std::vector<int> recv(static_cast<size_t>(size));
  int64_t total = 0;
  for (int p = 0; p < size; ++p) {
    total += counts[p];
    if (counts[p] > INT_MAX || total > INT_MAX) {
      std::snprintf(err, static_cast<size_t>(errLen),
                    "MPI data plane: a reducescatter of more than 2^31 elements exceeds MPI's int counts; use "
                    "HOROVOD_CPU_OPERATIONS=gloo for such tensors");
      return 1;
    }
    recv[p] = static_cast<int>(counts[p]);
  }
  HVD_MPI_TRY(MPI_Reduce_scatter(in, out, recv.data(), type, mop, comm));
  return 0;
}

int barrier(int64_t handle, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  HVD_MPI_TRY(MPI_Barrier(comm));
  return 0;
}

// Tag of the point-to-point messages on a data-plane communicator (only Adasum sends any).
constexpr int kSendRecvTag = 0x4144;

int sendRecv(int64_t handle, int peer, const void* send, int64_t sendBytes, void* recv, int64_t recvBytes,
             int64_t chunkBytes, char* err, int errLen) {
  MPI_Comm comm;
  if (toComm(handle, &comm, err, errLen) != 0) return 1;
  const int64_t chunk = chunkBytes > 0 && chunkBytes < INT_MAX ? chunkBytes : INT_MAX;
  // Both sides take the same number of steps (the larger of the two directions), with matching
  // sizes: step i carries the i-th chunk each way.
  for (int64_t sent = 0, received = 0; sent < sendBytes || received < recvBytes;) {
    const int64_t s = sendBytes - sent < chunk ? sendBytes - sent : chunk;
    const int64_t r = recvBytes - received < chunk ? recvBytes - received : chunk;
    HVD_MPI_TRY(MPI_Sendrecv(static_cast<const char*>(send) + sent, static_cast<int>(s), MPI_BYTE, peer, kSendRecvTag,
                             static_cast<char*>(recv) + received, static_cast<int>(r), MPI_BYTE, peer, kSendRecvTag,
                             comm, MPI_STATUS_IGNORE));
    sent += s;
    received += r;
  }
  return 0;
}

const HvdMpiPlugin kPlugin = {
    HVD_MPI_PLUGIN_ABI,  HVD_MPI_FLAVOR, libraryVersion, init,       rankSize, placement, broadcast,
    rendezvousBroadcast, setReducer,     allgatherInt,   commCreate, commFree, allreduce, allgatherv,
    broadcastBytes,      alltoallv,      reducescatter,  barrier,    sendRecv};

}  // namespace

extern "C" __attribute__((visibility("default"))) const HvdMpiPlugin* hvd_mpi_plugin(void) { return &kPlugin; }
