// Backend dispatch (engine/backend.h): responses go to the backend registered for their device;
// devices nobody serves are refused at enqueue; ops a backend does not support fail by name.
//
// No accelerator exists here, so a fake backend registers for ROCm devices and serves host
// memory: it records every response it receives and runs allreduces as a sum over a communicator
// it owns for its process set (built from its BackendContext, as a real backend does), so the
// result also proves the response reached every rank's fake backend.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cluster.h"
#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "engine/backend.h"
#include "engine/process_set_table.h"
#include "engine/tensor_queue.h"

namespace hvd::test {
namespace {

struct Seen {
  int rank;
  int32_t processSet;
  engine::Kind kind;
  std::vector<std::string> names;
  void* stream;
};

std::mutex seenMu;
std::vector<Seen> seen;
int backendsBuilt = 0;

class FakeBackend : public engine::CollectiveBackend {
 public:
  explicit FakeBackend(const engine::BackendContext& c) : comm_(c.transport, c.set.ranks, c.config.timeout) {}
  const char* name() const override { return "fake"; }
  // The fake runs a fixed sum: no knob applies.
  void applyKnobs(const engine::Knobs&) override {}
  bool supports(engine::Kind kind) const override { return kind == engine::Kind::kAllreduce; }
  void run(const engine::Response& r, engine::ProcessSet&, const std::vector<engine::Entry*>& entries) override {
    Seen s{comm_.globalRank(comm_.rank()), r.params.processSet, r.params.kind, {}, nullptr};
    for (const auto& t : r.tensors) s.names.push_back(t.data().name);
    if (!entries.empty() && entries[0] != nullptr) s.stream = entries[0]->stream;
    {
      std::lock_guard<std::mutex> lock(seenMu);
      seen.push_back(s);
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const size_t count = static_cast<size_t>(r.tensors[i].numElements());
      collectives::allreduce(comm_, entries[i]->input, entries[i]->output, count, r.params.dtype, ReduceOp::kSum, 1.0);
    }
  }

 private:
  Communicator comm_;
};

const bool kRegistered = [] {
  engine::registerBackend(engine::BackendFactory{"fake", {DeviceKind::kRocm}, [](const engine::BackendContext& c) {
                                                   std::lock_guard<std::mutex> lock(seenMu);
                                                   ++backendsBuilt;
                                                   return std::make_unique<FakeBackend>(c);
                                                 }});
  return true;
}();

TensorView onRocm(std::vector<float>& data, void* stream) {
  TensorView v = view(data, DataType::kFloat32);
  v.device.kind = DeviceKind::kRocm;
  v.device.index = 0;
  v.device.stream = stream;
  return v;
}

TEST(Backend, DeviceIdRoundTrip) {
  Device cuda{DeviceKind::kCuda, 3, nullptr};
  EXPECT_EQ(engine::deviceId(Device{}), engine::kCpuDevice);
  EXPECT_TRUE(engine::deviceOf(engine::deviceId(cuda)).sameDevice(cuda));
  EXPECT_EQ(deviceName(cuda), "cuda:3");
  EXPECT_EQ(deviceName(Device{}), "cpu");
  // The MPI data plane's factory ranks first and declines unless HOROVOD_CPU_OPERATIONS=mpi
  // asked for it (backends/mpi/mpi_backend.h).
  EXPECT_EQ(engine::backendNames(DeviceKind::kCpu), (std::vector<std::string>{"mpi", "cpu"}));
  EXPECT_TRUE(engine::backendServes(DeviceKind::kRocm));
  EXPECT_FALSE(engine::backendServes(DeviceKind::kCuda));
}

// The fake backend receives exactly the ROCm responses, on every rank; CPU ones go elsewhere.
TEST(Backend, ResponsesGoToTheirDevicesBackend) {
  {
    std::lock_guard<std::mutex> lock(seenMu);
    seen.clear();
    backendsBuilt = 0;
  }
  Cluster c(3);
  int streamTag = 0;
  c.run([&](int r, engine::Runtime& rt) {
    for (int step = 0; step < 3; ++step) {
      std::vector<float> dev(4, float(r + 1)), host(4, float(r + 1));
      WorkPtr a = rt.allreduce(onRocm(dev, &streamTag), onRocm(dev, &streamTag), named("dev.x"));
      WorkPtr b = rt.allreduce(view(host, DataType::kFloat32), view(host, DataType::kFloat32), named("host.x"));
      a->wait();
      b->wait();
      EXPECT_EQ(dev, std::vector<float>(4, 6.0f));
      EXPECT_EQ(host, std::vector<float>(4, 6.0f));
    }
  });
  std::lock_guard<std::mutex> lock(seenMu);
  EXPECT_EQ(backendsBuilt, 3);  // one per rank for (global set, rocm:0), kept across steps
  std::multiset<int> ranks;
  for (const auto& s : seen) {
    ranks.insert(s.rank);
    EXPECT_EQ(s.processSet, 0);
    EXPECT_EQ(s.kind, engine::Kind::kAllreduce);
    EXPECT_EQ(s.names, std::vector<std::string>{"dev.x"});  // never fused with the CPU tensor
    EXPECT_EQ(s.stream, &streamTag);
  }
  EXPECT_EQ(ranks, (std::multiset<int>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
}

TEST(Backend, UnservedDeviceIsRefusedAtEnqueue) {
  Cluster c(1);
  std::vector<float> x(2);
  TensorView v = view(x, DataType::kFloat32);
  v.device.kind = DeviceKind::kCuda;
  v.device.index = 1;
  expectThrowWith<InvalidArgument>([&] { c[0].allreduce(v, v, named("cuda.x")); },
                                   "no collective backend in this build runs on cuda:1");
  TensorView host = view(x, DataType::kFloat32);
  std::vector<float> y(2);
  TensorView rocm = onRocm(y, nullptr);
  expectThrowWith<InvalidArgument>([&] { c[0].allreduce(host, rocm, named("mixed.x")); },
                                   "the output is on rocm:0 but the input on cpu");
}

TEST(Backend, UnsupportedOpFailsNamingBackendAndOp) {
  Cluster c(2);
  c.run([&](int r, engine::Runtime& rt) {
    std::vector<float> x(4, 1.0f);
    WorkPtr w = rt.broadcast(onRocm(x, nullptr), named("dev.b"));
    expectThrowWith<Error>([&] { w->wait(); },
                           "The fake collective backend does not support BROADCAST on device rocm:0");
    // The engine keeps running: later operations work.
    std::vector<float> y(2, 1.0f);
    rt.allreduce(onRocm(y, nullptr), onRocm(y, nullptr), named("dev.after"))->wait();
    EXPECT_EQ(y, std::vector<float>(2, 2.0f));
  });
}

}  // namespace
}  // namespace hvd::test
