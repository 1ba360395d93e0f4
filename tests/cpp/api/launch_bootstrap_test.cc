// How init() finds its rendezvous without horovodrun (api/launch_bootstrap.h): the Slurm
// hostlist and port rules, and the choices that need no MPI. The MPI path itself is tested with
// real mpirun/mpiexec launches (tests/python/test_mpi.py).
#include <gtest/gtest.h>

#include "api/launch_bootstrap.h"
#include "common/params.h"
#include "horovod/errors.h"

namespace hvd::api {
namespace {

TEST(LaunchBootstrap, FirstSlurmHost) {
  EXPECT_EQ(firstSlurmHost("node07"), "node07");
  EXPECT_EQ(firstSlurmHost("node[07-09],gpu1"), "node07");
  EXPECT_EQ(firstSlurmHost("gpu1,node[07-09]"), "gpu1");
  EXPECT_EQ(firstSlurmHost("rack[3,5]-n[010-012]"), "rack3-n010");
  EXPECT_EQ(firstSlurmHost(""), "");
}

TEST(LaunchBootstrap, SlurmPortIsBelowTheEphemeralRange) {
  for (int64_t job : {0, 1, 4242, 99999999}) {
    for (int64_t step : {0, 1, 7}) {
      int port = slurmRendezvousPort(job, step);
      EXPECT_GE(port, 20000);
      EXPECT_LT(port, 32000);
    }
  }
  EXPECT_NE(slurmRendezvousPort(10, 0), slurmRendezvousPort(10, 1));
  EXPECT_NE(slurmRendezvousPort(10, 0), slurmRendezvousPort(11, 0));
}

TEST(LaunchBootstrap, NoLauncherMeansTheRuntimesOwnStore) {
  auto config = engine::Config::fromEnvironment(mapEnvironment({}));
  EXPECT_EQ(bootstrapWithoutLauncher(config, InitOptions{}), nullptr);
  auto dir = engine::Config::fromEnvironment(mapEnvironment(
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"HOROVOD_RENDEZVOUS_DIR", "/tmp/x"}}));
  EXPECT_EQ(bootstrapWithoutLauncher(dir, InitOptions{}), nullptr);  // a given rendezvous wins
}

TEST(LaunchBootstrap, SrunWithoutStepVariablesFailsClearly) {
  auto config = engine::Config::fromEnvironment(mapEnvironment({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}));
  try {
    bootstrapWithoutLauncher(config, InitOptions{});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NODELIST"), std::string::npos) << e.what();
  }
}

TEST(LaunchBootstrap, CpuOperationsMpiWithoutMpiFailsClearly) {
  // horovodrun (no --mpi) started this rank: no MPI to run the data plane on, so init refuses
  // instead of running the default data plane.
  auto config = engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_RANK", "0"},
                                                                {"HOROVOD_SIZE", "2"},
                                                                {"HOROVOD_RENDEZVOUS_DIR", "/tmp/x"},
                                                                {"HOROVOD_CPU_OPERATIONS", "MPI"}}));
  EXPECT_TRUE(config.cpuOperationsMpi);
  try {
    bootstrapWithoutLauncher(config, InitOptions{});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HOROVOD_CPU_OPERATIONS=mpi: this job was not started by MPI (launched by "
                                         "horovod)"),
              std::string::npos)
        << e.what();
  }
  auto plain = engine::Config::fromEnvironment(mapEnvironment({}));
  bootstrapWithoutLauncher(plain, InitOptions{});
  EXPECT_FALSE(plain.cpuOperationsMpi);
}

}  // namespace
}  // namespace hvd::api
