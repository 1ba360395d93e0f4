// Device tensors for the host-staged backend's tests: memory of the CUDA runtime the loader
// found (the host-memory stand-in, tests/gpu/standin, in CI), filled and read back through
// asynchronous copies on a producer stream, the way a framework hands Horovod its tensors: the
// input is written on the producer stream and the collective is enqueued at once, without a
// host synchronization, so only the backend's event ordering makes it read the right data (the
// stand-in's ordering checker fails any copy that is not ordered after the write).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cuda/cuda_library.h"
#include "engine/typed.h"
#include "horovod/horovod.h"

namespace hvd::test {

inline const cuda::CudaApi& gpuApi() {
  const cuda::CudaLibraries& libraries = cuda::cudaLibraries();
  if (libraries.api == nullptr) throw std::runtime_error("CUDA runtime not loaded: " + libraries.error);
  return *libraries.api;
}

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + gpuApi().rt.getErrorString(status));
}

// A stream of device 0 standing for a framework's compute stream.
inline cudaStream_t producerStream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    check(gpuApi().rt.streamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }();
  return stream;
}

// A tensor on device 0 with a host mirror (`host`) that upload() copies in.
class DeviceTensor {
 public:
  DeviceTensor(DataType dtype, std::vector<int64_t> shape)
      : host(dtype, shape), dtype_(dtype), shape_(std::move(shape)) {
    bytes_ = host.count() * dataTypeSize(dtype);
    check(gpuApi().rt.malloc(&data_, bytes_ == 0 ? 1 : bytes_), "cudaMalloc");
  }
  ~DeviceTensor() {
    gpuApi().rt.streamSynchronize(producerStream());  // an upload no collective consumed
    gpuApi().rt.free(data_);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  // Queues the copy of `host` on the producer stream (no host synchronization).
  void upload() {
    if (bytes_ > 0) {
      check(gpuApi().rt.memcpyAsync(data_, host.view().data, bytes_, cudaMemcpyHostToDevice, producerStream()),
            "cudaMemcpyAsync(upload)");
    }
  }
  TensorView view() const {
    TensorView v;
    v.data = data_;
    v.dtype = dtype_;
    v.shape = shape_;
    v.device = Device{DeviceKind::kCuda, 0, producerStream()};
    return v;
  }

  Buffer host;

 private:
  DataType dtype_;
  std::vector<int64_t> shape_;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

// The values of a device tensor, read back on the producer stream.
inline std::vector<double> download(const TensorView& v) {
  if (v.device.kind != DeviceKind::kCuda) throw std::runtime_error("download: not a CUDA tensor");
  Buffer host(v.dtype, v.shape);
  if (v.bytes() > 0) {
    check(gpuApi().rt.memcpyAsync(host.view().data, v.data, v.bytes(), cudaMemcpyDeviceToHost, producerStream()),
          "cudaMemcpyAsync(download)");
    check(gpuApi().rt.streamSynchronize(producerStream()), "cudaStreamSynchronize");
  }
  std::vector<double> values(host.count());
  for (size_t i = 0; i < values.size(); ++i) values[i] = host.get(i);
  return values;
}

// How many collectives the backend ran with `algorithm` (any when empty).
inline uint64_t countOf(const std::string& backend, const std::string& algorithm = "") {
  uint64_t n = 0;
  for (const auto& c : engineCounters()) {
    if (c.backend == backend && (algorithm.empty() || c.algorithm == algorithm)) n += c.count;
  }
  return n;
}

}  // namespace hvd::test
