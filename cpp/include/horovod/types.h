// Value types shared by the public C++ API and every layer of the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hvd {

// Element types a collective can carry. The numeric values are part of the binding ABI
// (python/horovod/common/dtypes.py mirrors them); append, never renumber.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
};
constexpr int kNumDataTypes = 11;

// Bytes per element; 0 for a value outside the enum. constexpr and header-only so that code
// which does not link the core (the TensorFlow kernel library) uses this one definition too.
constexpr size_t dataTypeSize(DataType type) {
  switch (type) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool: return 1;
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

// Horovod's lower-case name ("float32", "bfloat16", ...), used in error messages.
std::string_view dataTypeName(DataType type);
bool isFloatingPoint(DataType type);

// Where one process sits in the job: Horovod's rank, size, local_rank, local_size, cross_rank
// and cross_size as one value (hvd::placementsOnHosts in common/placement.h derives it from
// the hosts of the ranks).
struct Placement {
  int rank = 0;
  int size = 1;
  int localRank = 0;   // index among the ranks on this host, in rank order
  int localSize = 1;   // ranks on this host
  int crossRank = 0;   // index of this host among the hosts that have a rank with this local rank
  int crossSize = 1;   // hosts that have a rank with this local rank

  bool operator==(const Placement&) const = default;
};

// Reduction operators. Values equal Horovod's public constants (hvd.Average == 0, ...).
enum class ReduceOp : uint8_t {
  kAverage = 0,
  kSum = 1,
  kAdasum = 2,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};

// Kinds of collective request. Names in messages follow Horovod ("ALLREDUCE", ...).
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kJoin = 3,
  kAdasum = 4,
  kAlltoall = 5,
  kBarrier = 6,
  kReducescatter = 7,
};
constexpr int kNumOpTypes = 8;  // values are 0 .. kNumOpTypes - 1
std::string_view opTypeName(OpType type);

// Where a tensor's memory lives. Values are part of the wire format; append, never renumber.
enum class DeviceKind : uint8_t {
  kCpu = 0,
  kCuda = 1,
  kRocm = 2,
};
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int32_t index = 0;  // accelerator ordinal; 0 for the CPU
  // Accelerators: the stream (cudaStream_t, hipStream_t) on which the tensor's producers run.
  // The backend orders the collective after the work queued there, and the work's completion
  // orders later work on it. Null: the device's default stream. deviceWideStream(): the
  // producers' and consumers' streams are unknown (TensorFlow's GPU kernels: its C API gives a
  // kernel no stream): the backend orders the collective after all work queued on the device
  // before it runs, and releases engine-allocated outputs only after all work queued on the
  // device before their release (device-wide synchronizations, on Horovod's threads). Unused
  // for the CPU.
  void* stream = nullptr;

  static void* deviceWideStream() { return reinterpret_cast<void*>(~uintptr_t{0}); }
  static bool isDeviceWide(const void* s) { return s == deviceWideStream(); }

  bool isCpu() const { return kind == DeviceKind::kCpu; }
  bool sameDevice(const Device& o) const { return kind == o.kind && index == o.index; }
};
// "cpu", "cuda:0", "rocm:1": how messages name a device.
std::string deviceName(const Device& device);

// What init() takes besides the environment.
struct InitOptions {
  // Static process sets, registered with ids 1..n in this order. Must be identical on all ranks.
  std::vector<std::vector<int>> processSets;
  // Allow addProcessSet/removeProcessSet after init (also HOROVOD_DYNAMIC_PROCESS_SETS=1).
  bool dynamicProcessSets = false;
  // The MPI communicator that forms the job, as a Fortran handle (MPI_Comm_c2f; mpi4py's
  // Comm.py2f()); -1 = MPI_COMM_WORLD when launched by mpirun, no MPI otherwise. A communicator
  // makes init rendezvous through MPI, with this process's rank and size in it.
  int64_t mpiComm = -1;
};

}  // namespace hvd
