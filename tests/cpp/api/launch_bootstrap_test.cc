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
  auto dir = engine::Config::fromEnvironment(
      mapEnvironment({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"HOROVOD_RENDEZVOUS_DIR", "/tmp/x"}}));
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

}  // namespace
}  // namespace hvd::api
