// hvd_bench: the shared harness over Horovod's public C++ API (horovod/horovod.h).
//
//   horovodrun -np 2 build/bench/hvd_bench -o allreduce -b 4 -e 256M -f 4
//
// Each collective reuses one name per row, as a training loop reuses its tensor names, so the
// engine's steady-state path (response cache) is what gets measured.
#include <horovod/horovod.h>

#include <iostream>
#include <string>

#include "api/default_runtime.h"
#include "harness/bench_main.h"

namespace hvd::bench {
namespace {

DataType hvdType(ElemType type) {
  switch (type) {
    case ElemType::kUInt8: return DataType::kUInt8;
    case ElemType::kInt32: return DataType::kInt32;
    case ElemType::kInt64: return DataType::kInt64;
    case ElemType::kFloat16: return DataType::kFloat16;
    case ElemType::kBFloat16: return DataType::kBFloat16;
    case ElemType::kFloat32: return DataType::kFloat32;
    case ElemType::kFloat64: return DataType::kFloat64;
  }
  return DataType::kFloat32;
}

TensorView view(const void* data, size_t count, ElemType type) {
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = hvdType(type);
  v.shape = {static_cast<int64_t>(count)};
  return v;
}

Options named(const char* name) {
  Options o;
  o.name = name;
  return o;
}

class HvdComm : public BenchComm {
 public:
  HvdComm() { hvd::init(); }
  ~HvdComm() override { hvd::shutdown(); }

  int rank() const override { return hvd::rank(); }
  int size() const override { return hvd::size(); }
  std::string systemName() const override { return "horovod"; }
  bool supports(ElemType) const override { return true; }

  void allreduce(const void* in, void* out, size_t count, ElemType type) override {
    hvd::allreduce(view(in, count, type), view(out, count, type), named("bench.allreduce"));
  }
  const void* allgather(const void* in, size_t countPerRank, ElemType type, void*) override {
    gathered_ = hvd::allgather(view(in, countPerRank, type), named("bench.allgather"));
    return gathered_.view.data;
  }
  void broadcast(void* buffer, size_t count, ElemType type, int root) override {
    Options o = named("bench.broadcast");
    o.root = root;
    hvd::broadcast(view(buffer, count, type), o);
  }
  const void* alltoall(const void* in, size_t countPerRank, ElemType type, void*) override {
    exchanged_ = hvd::alltoall(view(in, countPerRank * size_t(size()), type), named("bench.alltoall"));
    return exchanged_.view.data;
  }
  void reducescatter(const void* in, void* out, size_t countPerRank, ElemType type) override {
    hvd::reducescatter(view(in, countPerRank * size_t(size()), type), view(out, countPerRank, type),
                       named("bench.reducescatter"));
  }
  void allreduceBatch(const std::vector<const void*>& in, const std::vector<void*>& out, size_t count,
                      ElemType type) override {
    if (names_.size() < in.size()) {
      for (size_t j = names_.size(); j < in.size(); ++j) names_.push_back("bench.batch." + std::to_string(j));
    }
    work_.clear();
    for (size_t j = 0; j < in.size(); ++j) {
      Options o;
      o.name = names_[j];
      work_.push_back(hvd::allreduceAsync(view(in[j], count, type), view(out[j], count, type), o));
    }
    for (auto& w : work_) w->wait();
  }
  std::shared_ptr<void> allocateShared(size_t bytes) override {
    return hvd::allocateShared(DataType::kUInt8, {static_cast<int64_t>(bytes)}).storage;
  }
  void allreduceAverageInPlace(void* buf, size_t count, ElemType type) override {
    Options o = named("bench.allreduce_shared");
    o.op = ReduceOp::kAverage;
    hvd::allreduce(view(buf, count, type), view(buf, count, type), o);
  }
  void allreduceAverageInto(const void* in, void* out, size_t count, ElemType type) override {
    Options o = named("bench.allreduce_into_shared");
    o.op = ReduceOp::kAverage;
    hvd::allreduce(view(in, count, type), view(out, count, type), o);
  }
  size_t fusionBufferBytes() override {
    auto runtime = hvd::api::runtimeForOps();
    return runtime ? runtime->stats().fusionBufferBytes : 0;
  }
  void releaseOutputs() override {
    gathered_ = OwnedTensor{};
    exchanged_ = OwnedTensor{};
  }
  void barrier() override { hvd::barrier(); }
  void maxOverRanks(std::vector<double>& values) override {
    if (values.empty()) return;
    TensorView v = view(values.data(), values.size(), ElemType::kFloat64);
    std::string name = "bench.stats.max." + std::to_string(values.size());
    Options o = named(name.c_str());
    o.op = ReduceOp::kMax;
    hvd::allreduce(v, v, o);
  }

 private:
  OwnedTensor gathered_;
  OwnedTensor exchanged_;
  std::vector<std::string> names_;
  std::vector<WorkPtr> work_;
};

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  try {
    return hvd::bench::benchMain(argc, argv, [] { return std::make_unique<hvd::bench::HvdComm>(); });
  } catch (const hvd::Error& e) {
    std::cerr << "hvd_bench: " << e.what() << "\n";
    return 3;
  }
}
