// horovodrun's boolean flag pairs (cli.cc's BoolPair table) with --config-file: each form sets
// its value, the two forms exclude each other, and an explicit flag beats the config file, which
// beats the default (unset). The same rules Horovod's argparse groups and set_args_from_config
// apply.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "config_file.h"

namespace hvd::launcher {
namespace {

struct Pair {
  const char* on;
  const char* off;
  const char* section;
  const char* key;
  std::optional<bool> Options::* field;
};

const std::vector<Pair> kPairs = {
    {"--hierarchical-allreduce", "--no-hierarchical-allreduce", "params", "hierarchical_allreduce",
     &Options::hierarchicalAllreduce},
    {"--hierarchical-allgather", "--no-hierarchical-allgather", "params", "hierarchical_allgather",
     &Options::hierarchicalAllgather},
    {"--torus-allreduce", "--no-torus-allreduce", "params", "torus_allreduce", &Options::torusAllreduce},
    {"--autotune", "--no-autotune", "autotune", "enabled", &Options::autotune},
    {"--timeline-mark-cycles", "--no-timeline-mark-cycles", "timeline", "mark_cycles", &Options::timelineMarkCycles},
    {"--stall-check", "--no-stall-check", "stall_check", "enabled", &Options::stallCheck},
    {"--mpi-threads-disable", "--no-mpi-threads-disable", "library_options", "mpi_threads_disable",
     &Options::mpiThreadsDisable},
    {"--log-with-timestamp", "--log-without-timestamp", "logging", "with_timestamp", &Options::logWithTimestamp},
};

class ConfigFile {
 public:
  explicit ConfigFile(const std::string& text) {
    char name[] = "/tmp/hvd_cli_test_XXXXXX";
    int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~ConfigFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Options parseAndMerge(std::vector<std::string> args) {
  args.insert(args.end(), {"-np", "1", "true"});
  Options o = parseCommandLine(args);
  if (o.configFile.has_value()) applyConfigFile(*o.configFile, o);
  validateOptions(o);
  return o;
}

TEST(CliBoolPairs, EachFormSetsItsValueAndNeitherLeavesItUnset) {
  for (const auto& p : kPairs) {
    SCOPED_TRACE(p.on);
    EXPECT_EQ(parseAndMerge({p.on}).*p.field, std::optional<bool>(true));
    EXPECT_EQ(parseAndMerge({p.off}).*p.field, std::optional<bool>(false));
    EXPECT_FALSE((parseAndMerge({}).*p.field).has_value());
  }
}

TEST(CliBoolPairs, FlagBeatsConfigFileBeatsDefault) {
  for (const auto& p : kPairs) {
    for (bool fileValue : {true, false}) {
      ConfigFile file(std::string(p.section) + ":\n  " + p.key + ": " + (fileValue ? "true" : "false") + "\n");
      SCOPED_TRACE(std::string(p.on) + " with " + p.section + "." + p.key + "=" + (fileValue ? "true" : "false"));
      EXPECT_EQ(parseAndMerge({"--config-file", file.path()}).*p.field, std::optional<bool>(fileValue));
      for (bool flagValue : {true, false}) {
        const char* flag = flagValue ? p.on : p.off;
        EXPECT_EQ(parseAndMerge({"--config-file", file.path(), flag}).*p.field, std::optional<bool>(flagValue));
        EXPECT_EQ(parseAndMerge({flag, "--config-file", file.path()}).*p.field, std::optional<bool>(flagValue));
      }
    }
  }
}

TEST(CliBoolPairs, TheTwoFormsExcludeEachOther) {
  for (const auto& p : kPairs) {
    SCOPED_TRACE(p.on);
    try {
      parseCommandLine({p.on, p.off, "true"});
      ADD_FAILURE() << "accepted " << p.on << " " << p.off;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("argument ") + p.off + ": not allowed with argument " + p.on);
    }
    EXPECT_NO_THROW(parseCommandLine({p.off, p.off, "true"}));
  }
}

TEST(CliBoolPairs, DeprecatedTimestampSpellingsJoinTheTimestampGroup) {
  EXPECT_EQ(parseCommandLine({"--log-hide-timestamp", "true"}).logWithTimestamp, std::optional<bool>(false));
  EXPECT_EQ(parseCommandLine({"--no-log-hide-timestamp", "true"}).logWithTimestamp, std::optional<bool>(true));
  EXPECT_THROW(parseCommandLine({"--log-hide-timestamp", "--log-with-timestamp", "true"}), UsageError);
  EXPECT_THROW(parseCommandLine({"--no-log-hide-timestamp", "--log-without-timestamp", "true"}), UsageError);
  // Forwarded-output timestamps are a separate switch.
  Options o = parseCommandLine({"--log-without-timestamp", "--prefix-output-with-timestamp", "true"});
  EXPECT_TRUE(o.prefixOutputWithTimestamp);
  EXPECT_EQ(o.logWithTimestamp, std::optional<bool>(false));
}

TEST(CliBoolPairs, StallCheckSectionWithoutEnabledEnablesTheCheck) {
  ConfigFile file("stall_check:\n  warning_time_seconds: 7\n");
  EXPECT_EQ(parseAndMerge({"--config-file", file.path()}).stallCheck, std::optional<bool>(true));
  EXPECT_EQ(parseAndMerge({"--config-file", file.path(), "--no-stall-check"}).stallCheck, std::optional<bool>(false));
  ConfigFile empty("stall_check:\n");
  EXPECT_FALSE(parseAndMerge({"--config-file", empty.path()}).stallCheck.has_value());
}

TEST(CliHelp, ListsBothFormsOfEveryPair) {
  std::string help = usageText();
  for (const auto& p : kPairs) {
    EXPECT_NE(help.find(std::string("\n  ") + p.on + " "), std::string::npos) << p.on;
    EXPECT_NE(help.find(std::string("\n  ") + p.off + " "), std::string::npos) << p.off;
  }
}

}  // namespace
}  // namespace hvd::launcher
