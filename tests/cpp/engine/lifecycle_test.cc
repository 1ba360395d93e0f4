// Init, shutdown, re-init; configuration errors; launcher variable mapping.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cluster.h"
#include "common/logging.h"
#include "store/file_store.h"
#include "typed.h"

namespace hvd::test {
namespace {

const std::string kShutdown = kShutdownMessage;

TEST(Lifecycle, ShutdownOnOneRankFailsPendingOpsEverywhere) {
  Cluster cluster(3);
  std::atomic<int> pendingSubmitted{0};
  cluster.run([&](int rank, engine::Runtime& rt) {
    if (rank == 1) {
      while (pendingSubmitted.load() < 2) std::this_thread::yield();
      rt.shutdown();
      EXPECT_FALSE(rt.initialized());
      std::vector<float> a(2), b(2);
      expectThrowWith<Error>(
          [&] { rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("late")); },
          "Horovod has not been initialized");
      return;
    }
    std::vector<float> a(2), b(2);
    // Only ranks 0 and 2 submit it: it stays pending until the shutdown fails it.
    auto w = rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("lonely"));
    pendingSubmitted++;
    try {
      w->wait();
      ADD_FAILURE() << "pending op completed";
    } catch (const Aborted& e) {
      // Horovod's message, then the rank that left first.
      EXPECT_EQ(std::string(e.what()),
                std::string(kShutdown) + " Rank 1 shut down first (rank 1 called hvd.shutdown() or exited).");
    }
    // Later ops fail synchronously with the same message; the runtime still reports initialized.
    EXPECT_TRUE(rt.initialized());
    expectThrowWith<Aborted>(
        [&] { rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("x")); }, kShutdown);
    rt.shutdown();
  });
}

TEST(Lifecycle, InitShutdownInitKeepsRankAndSize) {
  auto store = std::make_shared<MemoryStore>();
  for (int round = 0; round < 3; ++round) {
    Cluster cluster(3, {}, {}, store);
    cluster.run([&](int rank, engine::Runtime& rt) {
      EXPECT_EQ(rt.topology().rank, rank);
      EXPECT_EQ(rt.topology().size, 3);
      EXPECT_EQ(rt.topology().localSize, 3);
      EXPECT_EQ(rt.topology().localRank, rank);
      EXPECT_EQ(rt.topology().crossSize, 1);
      EXPECT_TRUE(rt.topology().homogeneous);
      std::vector<int32_t> a(2, round), b(2);
      rt.allreduce(view(a, DataType::kInt32), view(b, DataType::kInt32), named("r"))->wait();
      EXPECT_EQ(b[0], 3 * round);
    });
    cluster.shutdown();
  }
}

TEST(Lifecycle, ShutdownIsQuickWhenAllRanksLeave) {
  Cluster cluster(4);
  auto start = std::chrono::steady_clock::now();
  cluster.shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
}

TEST(Lifecycle, TopologyFromHostnames) {
  // Ranks 0,1 on host a; 2,3,4 on host b: not homogeneous; cross groups by local rank.
  auto store = std::make_shared<MemoryStore>();
  std::vector<engine::Topology> topo(5);
  runRankThreads(5, [&](int r) {
    auto config =
        engine::Config::fromEnvironment(mapEnvironment(rankEnv(r, 5, {{"HOROVOD_HOSTNAME", r < 2 ? "a" : "b"}})));
    engine::Runtime rt(config, store);
    rt.init();
    topo[r] = rt.topology();
    rt.shutdown();
  });
  EXPECT_EQ(topo[1].localRank, 1);
  EXPECT_EQ(topo[1].localSize, 2);
  EXPECT_EQ(topo[4].localRank, 2);
  EXPECT_EQ(topo[4].localSize, 3);
  EXPECT_EQ(topo[2].crossRank, 1);
  EXPECT_EQ(topo[2].crossSize, 2);
  EXPECT_EQ(topo[4].crossRank, 0);
  EXPECT_EQ(topo[4].crossSize, 1);
  EXPECT_FALSE(topo[0].homogeneous);
}

TEST(Config, BadValuesNameVariableAndValue) {
  auto expectBad = [](const char* var, const char* value, const std::string& text) {
    try {
      engine::Config::fromEnvironment(mapEnvironment({{var, value}}));
      ADD_FAILURE() << var << "=" << value << " accepted";
    } catch (const InvalidArgument& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(var), std::string::npos) << msg;
      EXPECT_NE(msg.find(value), std::string::npos) << msg;
      EXPECT_NE(msg.find(text), std::string::npos) << msg;
    }
  };
  expectBad("HOROVOD_FUSION_THRESHOLD", "64MB", "");
  expectBad("HOROVOD_CYCLE_TIME", "fast", "");
  expectBad("HOROVOD_CACHE_CAPACITY", "lots", "");
  expectBad("HOROVOD_STALL_CHECK_TIME_SECONDS", "1m", "");
  expectBad("HOROVOD_BURST_QUIET_US", "soon", "");
  expectBad("HOROVOD_CONTROLLER", "nccl", "Unsupported controller type, only MPI and Gloo are supported");
  expectBad("HOROVOD_CPU_OPERATIONS", "cuda",
            "Unsupported CPU operation type, only MPI, oneCCL, and Gloo are supported");
  // HOROVOD_CPU_OPERATIONS=mpi is accepted here; init checks that MPI started the job.
  EXPECT_TRUE(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CPU_OPERATIONS", "mpi"}})).cpuOperationsMpi);
  EXPECT_FALSE(engine::Config::fromEnvironment(mapEnvironment({})).cpuOperationsMpi);
  // HOROVOD_CONTROLLER=mpi is accepted: it means "rendezvous through MPI" (api/launch_bootstrap.h).
  EXPECT_TRUE(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CONTROLLER", "MPI"}})).controllerMpi);
  expectBad("HOROVOD_GLOO_TIMEOUT_SECONDS", "0", "");
  EXPECT_NO_THROW(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CONTROLLER", "GLOO"},
                                                                  {"HOROVOD_CPU_OPERATIONS", "gloo"},
                                                                  {"HOROVOD_CYCLE_TIME", "0.5"},
                                                                  {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}})));
}

TEST(Config, GpuOperationsResolveToOneImplementation) {
  auto gpu = [](std::vector<std::pair<std::string, std::string>> env) {
    return engine::Config::fromEnvironment(mapEnvironment(env));
  };
  EXPECT_EQ(gpu({}).gpuOperations, engine::GpuOperations::kAuto);
  EXPECT_EQ(gpu({}).gpuOperationsSource, "");
  EXPECT_EQ(gpu({{"HOROVOD_GPU_OPERATIONS", "nccl"}}).gpuOperations, engine::GpuOperations::kNccl);
  EXPECT_EQ(gpu({{"HOROVOD_GPU_OPERATIONS", "HOST"}}).gpuOperations, engine::GpuOperations::kHost);
  // Horovod's MPI value: through the CPU data plane, here host-staged.
  EXPECT_EQ(gpu({{"HOROVOD_GPU_OPERATIONS", "MPI"}}).gpuOperations, engine::GpuOperations::kHost);
  // A per-op variable alone chooses for every op; agreeing values are fine.
  const auto c = gpu({{"HOROVOD_GPU_ALLREDUCE", "host"}, {"HOROVOD_GPU_BROADCAST", "MPI"}});
  EXPECT_EQ(c.gpuOperations, engine::GpuOperations::kHost);
  EXPECT_EQ(c.gpuOperationsSource, "HOROVOD_GPU_ALLREDUCE=host, HOROVOD_GPU_BROADCAST=MPI");
  EXPECT_EQ(gpu({{"HOROVOD_GPU_STAGED_CHUNK_BYTES", "65536"}}).gpuStagedChunkBytes, 65536);

  auto expectBad = [&](std::vector<std::pair<std::string, std::string>> env, const std::vector<std::string>& texts) {
    try {
      gpu(env);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      for (const auto& text : texts) EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expectBad({{"HOROVOD_GPU_OPERATIONS", "gloo"}},
            {"HOROVOD_GPU_OPERATIONS='gloo'", "accepted values are NCCL and HOST"});
  expectBad({{"HOROVOD_GPU_ALLTOALL", "DDL"}}, {"HOROVOD_GPU_ALLTOALL='DDL'", "NCCL and HOST"});
  expectBad({{"HOROVOD_GPU_OPERATIONS", "HOST"}, {"HOROVOD_GPU_ALLREDUCE", "NCCL"}},
            {"HOROVOD_GPU_OPERATIONS=HOST", "HOROVOD_GPU_ALLREDUCE=NCCL", "one implementation"});
  expectBad({{"HOROVOD_GPU_STAGED_CHUNK_BYTES", "-1"}}, {"HOROVOD_GPU_STAGED_CHUNK_BYTES='-1'"});
}

TEST(Config, BadValueFailsInitThroughApiLayer) {
  Cluster* never = nullptr;
  (void)never;
  try {
    auto config = engine::Config::fromEnvironment(mapEnvironment(rankEnv(0, 1, {{"HOROVOD_CACHE_CAPACITY", "x1"}})));
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HOROVOD_CACHE_CAPACITY='x1'"), std::string::npos) << e.what();
  }
}

TEST(Config, FusionThresholdRounding) {
  EXPECT_EQ(engine::Config::roundFusionThreshold(0, 4, true), 0);
  EXPECT_EQ(engine::Config::roundFusionThreshold(1000, 4, true), 2048);
  EXPECT_EQ(engine::Config::roundFusionThreshold(2048, 4, true), 2048);
  EXPECT_EQ(engine::Config::roundFusionThreshold(1000, 4, false), 1000);
  EXPECT_EQ(engine::Config::roundFusionThreshold(134217728, 3, true), 134218752);
}

TEST(Config, LauncherVariableMapping) {
  auto c = engine::Config::fromEnvironment(mapEnvironment({{"OMPI_COMM_WORLD_RANK", "2"},
                                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 4);
  EXPECT_EQ(c.localRank, 0);
  EXPECT_EQ(c.localSize, 2);
  EXPECT_EQ(c.launchedBy, "openmpi");
  c = engine::Config::fromEnvironment(
      mapEnvironment({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.size, 8);
  EXPECT_EQ(c.localRank, 1);
  EXPECT_EQ(c.launchedBy, "slurm");
  c = engine::Config::fromEnvironment(
      mapEnvironment({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "1"}}));
  EXPECT_EQ(c.size, 1);  // horovodrun's variables win
  // Hydra marks its launches with MPI_LOCALRANKID; srun's PMI plugin sets PMI_RANK without it.
  c = engine::Config::fromEnvironment(mapEnvironment({{"PMI_RANK", "1"},
                                                      {"PMI_SIZE", "4"},
                                                      {"MPI_LOCALRANKID", "1"},
                                                      {"MPI_LOCALNRANKS", "2"},
                                                      {"SLURM_PROCID", "0"},
                                                      {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(c.launchedBy, "pmi");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.localSize, 2);
  c = engine::Config::fromEnvironment(mapEnvironment({{"PMI_RANK", "5"},
                                                      {"PMI_SIZE", "8"},
                                                      {"SLURM_PROCID", "5"},
                                                      {"SLURM_STEP_NUM_TASKS", "8"},
                                                      {"SLURM_NTASKS", "16"},
                                                      {"SLURM_JOB_ID", "77"},
                                                      {"SLURM_STEP_ID", "2"},
                                                      {"SLURM_NODEID", "1"},
                                                      {"SLURM_STEP_NODELIST", "n[1-2]"}}));
  EXPECT_EQ(c.launchedBy, "slurm");
  EXPECT_EQ(c.size, 8);  // the step's tasks, not the job's
  EXPECT_EQ(c.slurmJobId, 77);
  EXPECT_EQ(c.slurmStepId, 2);
  EXPECT_EQ(c.slurmNodeId, 1);
  EXPECT_EQ(c.slurmNodeList, "n[1-2]");
  expectThrowWith<InvalidArgument>(
      [] { engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_RANK", "3"}, {"HOROVOD_SIZE", "2"}})); },
      "Invalid rank 3");
}

TEST(Lifecycle, MpirunWithoutRendezvousFailsClearly) {
  auto config = engine::Config::fromEnvironment(mapEnvironment({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  engine::Runtime rt(config);
  expectThrowWith<InvalidArgument>([&] { rt.init(); }, "HOROVOD_RENDEZVOUS_DIR");
  auto config2 = engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "2"}}));
  engine::Runtime rt2(config2);
  expectThrowWith<InvalidArgument>([&] { rt2.init(); }, "HOROVOD_GLOO_RENDEZVOUS_ADDR");
}

TEST(Lifecycle, SlurmWithFileStoreRendezvous) {
  std::string dir = (std::filesystem::temp_directory_path() / ("hvd-engine-fs-" + std::to_string(getpid()))).string();
  runRankThreads(3, [&](int r) {
    auto config = engine::Config::fromEnvironment(mapEnvironment({{"SLURM_PROCID", std::to_string(r)},
                                                                  {"SLURM_NTASKS", "3"},
                                                                  {"SLURM_LOCALID", std::to_string(r)},
                                                                  {"HOROVOD_RENDEZVOUS_DIR", dir},
                                                                  {"HOROVOD_TRANSPORT", "local"},
                                                                  {"HOROVOD_HOSTNAME", "h"}}));
    engine::Runtime rt(config);
    rt.init();
    std::vector<int32_t> a(1, r), b(1);
    rt.allreduce(view(a, DataType::kInt32), view(b, DataType::kInt32), named("fs"))->wait();
    EXPECT_EQ(b[0], 3);
    rt.shutdown();
  });
  std::filesystem::remove_all(dir);
}

TEST(Lifecycle, OpsBeforeInitAndTypes) {
  engine::Runtime rt(engine::Config::fromEnvironment(mapEnvironment({})));
  std::vector<float> a(1), b(1);
  expectThrowWith<Error>([&] { rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("x")); },
                         "Horovod has not been initialized; use hvd.init().");
  rt.init();  // size 1, own MemoryStore
  rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("x"))->wait();
  rt.shutdown();
  rt.shutdown();  // idempotent
}

// Knobs set explicitly are recorded: autotuning leaves them alone.
TEST(Config, RecordsWhichTunableKnobsWereSetExplicitly) {
  engine::Config none = engine::Config::fromEnvironment(mapEnvironment({}));
  EXPECT_FALSE(none.pinned.fusionThreshold || none.pinned.cacheCapacity || none.pinned.burstQuiet ||
               none.pinned.callerProgress || none.pinned.callerSpin || none.pinned.allreduceAlgorithm ||
               none.pinned.hierarchical);
  engine::Config some = engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_FUSION_THRESHOLD", "1048576"},
                                                                        {"HOROVOD_CACHE_CAPACITY", "0"},
                                                                        {"HOROVOD_ALLREDUCE_ALGO", "ring"},
                                                                        {"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}}));
  EXPECT_TRUE(some.pinned.fusionThreshold);
  EXPECT_TRUE(some.pinned.cacheCapacity);
  EXPECT_TRUE(some.pinned.allreduceAlgorithm);
  EXPECT_TRUE(some.pinned.hierarchical);
  EXPECT_FALSE(some.pinned.burstQuiet);
}
}  // namespace
}  // namespace hvd::test

namespace hvd::test {
namespace {

// Knobs of features this build lacks: a warning on rank 0 naming the variable and why, nothing
// on other ranks, nothing when unset.
TEST(Config, InertKnobsAreNamedInAWarningOnRankZero) {
  std::vector<std::string> lines;
  LogSink previous = setLogSink([&](LogLevel, const std::string& line) { lines.push_back(line); });
  engine::Config::fromEnvironment(mapEnvironment(
      rankEnv(0, 2, {{"HOROVOD_TORUS_ALLREDUCE", "1"}, {"HOROVOD_ENABLE_XLA_OPS", "1"}, {"HOROVOD_CYCLE_TIME", "5"}})));
  engine::Config::fromEnvironment(
      mapEnvironment(rankEnv(1, 2, {{"HOROVOD_TORUS_ALLREDUCE", "1"}, {"HOROVOD_CYCLE_TIME", "5"}})));
  engine::Config::fromEnvironment(mapEnvironment(rankEnv(0, 2, {})));
  // Autotuning works: no warning for it.
  engine::Config::fromEnvironment(mapEnvironment(rankEnv(0, 2, {{"HOROVOD_AUTOTUNE", "1"}})));
  setLogSink(std::move(previous));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("HOROVOD_TORUS_ALLREDUCE is set but has no effect in this build"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("HOROVOD_ENABLE_XLA_OPS is set but has no effect in this build"), std::string::npos)
      << lines[1];
  // The engine has no cycle: the warning names the batching window that replaces it.
  EXPECT_NE(lines[2].find("HOROVOD_CYCLE_TIME is set but has no effect"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("HOROVOD_BURST_QUIET_US"), std::string::npos) << lines[2];
}

// HOROVOD_NUM_NCCL_STREAMS is the NCCL backend's (backends/cuda): read, range-checked, no warning.
TEST(Config, NcclStreamsAreReadAndChecked) {
  std::vector<std::string> lines;
  LogSink previous = setLogSink([&](LogLevel, const std::string& line) { lines.push_back(line); });
  const auto config =
      engine::Config::fromEnvironment(mapEnvironment(rankEnv(0, 2, {{"HOROVOD_NUM_NCCL_STREAMS", "3"}})));
  setLogSink(std::move(previous));
  EXPECT_EQ(config.numNcclStreams, 3);
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(engine::Config::fromEnvironment(mapEnvironment(rankEnv(0, 2, {}))).numNcclStreams, 1);
  expectThrowWith<InvalidArgument>(
      [] { engine::Config::fromEnvironment(mapEnvironment(rankEnv(0, 2, {{"HOROVOD_NUM_NCCL_STREAMS", "0"}}))); },
      "HOROVOD_NUM_NCCL_STREAMS");
}

}  // namespace
}  // namespace hvd::test
