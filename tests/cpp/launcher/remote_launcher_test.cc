// How horovodrun picks the launcher for remote workers (remote_launcher.h): ssh outside LSF,
// blaunch inside an LSF job when it is on PATH, the ssh flags and --remote-launcher overriding.
#include "remote_launcher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace hvd::launcher {
namespace {

// A PATH folder holding an executable named blaunch (and one without it).
class RemoteLauncherChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/hvd-blaunch-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    blaunch_ = dir_ + "/blaunch";
    std::ofstream(blaunch_) << "#!/bin/sh\n";
    ASSERT_EQ(chmod(blaunch_.c_str(), 0755), 0);
  }
  void TearDown() override {
    unlink(blaunch_.c_str());
    rmdir(dir_.c_str());
  }
  const EnvMap lsf_{{"LSB_JOBID", "4242"}};
  std::string dir_, blaunch_;
};

TEST_F(RemoteLauncherChoice, OutsideLsfItIsSshWithNothingSaid) {
  const auto choice = chooseRemoteLauncher(Options{}, EnvMap{}, dir_);
  EXPECT_EQ(choice.blaunchPath, "");
  EXPECT_EQ(choice.note, "");
}

TEST_F(RemoteLauncherChoice, InsideLsfWithBlaunchOnPathItIsBlaunchAndSaysSo) {
  const auto choice = chooseRemoteLauncher(Options{}, lsf_, "/nonexistent:" + dir_);
  EXPECT_EQ(choice.blaunchPath, blaunch_);
  EXPECT_NE(choice.note.find("LSF job 4242"), std::string::npos) << choice.note;
  EXPECT_NE(choice.note.find("--remote-launcher ssh"), std::string::npos) << choice.note;
}

TEST_F(RemoteLauncherChoice, InsideLsfWithoutBlaunchItIsSsh) {
  EXPECT_EQ(chooseRemoteLauncher(Options{}, lsf_, "/nonexistent").blaunchPath, "");
}

TEST_F(RemoteLauncherChoice, SshFlagsKeepSshInsideLsfAndSayWhy) {
  Options port;
  port.sshPort = 2222;
  Options identity;
  identity.sshIdentityFile = "/root/.ssh/id";
  for (const Options& o : {port, identity}) {
    const auto choice = chooseRemoteLauncher(o, lsf_, dir_);
    EXPECT_EQ(choice.blaunchPath, "");
    EXPECT_NE(choice.note.find("--ssh-port/--ssh-identity-file"), std::string::npos) << choice.note;
  }
}

TEST_F(RemoteLauncherChoice, AnExplicitChoiceWins) {
  Options ssh;
  ssh.remoteLauncher = "ssh";
  EXPECT_EQ(chooseRemoteLauncher(ssh, lsf_, dir_).blaunchPath, "");
  Options blaunch;
  blaunch.remoteLauncher = "blaunch";
  blaunch.sshPort = 2222;  // the explicit option beats the ssh flags
  EXPECT_EQ(chooseRemoteLauncher(blaunch, lsf_, dir_).blaunchPath, blaunch_);
}

TEST_F(RemoteLauncherChoice, BlaunchOutsideLsfOrMissingIsAUsageError) {
  Options blaunch;
  blaunch.remoteLauncher = "blaunch";
  EXPECT_THROW(chooseRemoteLauncher(blaunch, EnvMap{}, dir_), UsageError);
  EXPECT_THROW(chooseRemoteLauncher(blaunch, lsf_, "/nonexistent"), UsageError);
}

}  // namespace
}  // namespace hvd::launcher
