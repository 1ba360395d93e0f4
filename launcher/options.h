// Options: everything the command line and --config-file can set, with Horovod's names and
// meanings. A std::optional field that holds a value was set explicitly
// (on the command line, or later by the config file for options the command line left unset);
// an empty one exports nothing, so the launcher's own environment passes through unchanged.
//
// Filled by parseCommandLine (cli.h), merged with applyConfigFile (config_file.h), checked by
// validateOptions (cli.h); read-only afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "horovod/errors.h"

namespace hvd::launcher {

// Bad input on the command line, in a config file, host list or hostfile: the launcher prints
// "horovodrun: error: <message>" and exits with status 2 before starting any worker.
class UsageError : public InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

// A failure to start or run the job that is not the user's input (an unreachable host, a
// timeout): "horovodrun: error: <message>", exit status 1.
class LaunchError : public Error {
  using Error::Error;
};

// The launcher received SIGINT/SIGTERM/SIGHUP before the workers were running.
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal) : Error("interrupted"), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

enum class Controller { kDefault, kGloo, kMpi, kJsrun };

struct Options {
  // General.
  std::optional<int> numProc;
  bool checkBuild = false;
  bool version = false;
  bool help = false;
  bool disableCache = false;
  std::optional<double> startTimeout;
  std::vector<std::string> networkInterfaces;  // from --network-interfaces and --network-interface
  std::optional<std::string> outputFilename;
  bool verbose = false;
  std::optional<std::string> configFile;
  std::vector<std::string> command;

  // SSH.
  std::optional<int> sshPort;
  std::optional<std::string> sshIdentityFile;
  std::optional<std::string> remoteLauncher;  // "ssh" or "blaunch" (remote_launcher.h); unset: chosen

  // Tunables.
  std::optional<int64_t> fusionThresholdMb;
  std::optional<double> cycleTimeMs;
  std::optional<int64_t> cacheCapacity;
  std::optional<bool> hierarchicalAllreduce;
  std::optional<bool> hierarchicalAllgather;
  std::optional<bool> torusAllreduce;

  // Autotune.
  std::optional<bool> autotune;
  std::optional<std::string> autotuneLogFile;
  std::optional<int64_t> autotuneWarmupSamples;
  std::optional<int64_t> autotuneStepsPerSample;
  std::optional<int64_t> autotuneBayesOptMaxSamples;
  std::optional<double> autotuneGaussianProcessNoise;

  // Elastic (elastic_launch.h).
  std::optional<int> minNumProc;
  std::optional<int> maxNumProc;
  std::optional<int> slotsPerHost;
  std::optional<double> elasticTimeout;
  std::optional<int> resetLimit;
  std::optional<std::pair<int, int>> blacklistCooldownRange;

  // Timeline.
  std::optional<std::string> timelineFilename;
  std::optional<bool> timelineMarkCycles;

  // Stall check. stallCheck = false is --no-stall-check.
  std::optional<bool> stallCheck;
  std::optional<int64_t> stallCheckWarningTimeSeconds;
  std::optional<int64_t> stallCheckShutdownTimeSeconds;

  // Library.
  std::optional<bool> mpiThreadsDisable;
  std::optional<std::string> mpiArgs;
  bool tcp = false;
  std::optional<std::string> bindingArgs;
  std::optional<int64_t> numNcclStreams;
  std::optional<int64_t> threadAffinity;
  std::optional<int64_t> glooTimeoutSeconds;

  // Logging.
  std::optional<std::string> logLevel;
  std::optional<bool> logWithTimestamp;
  bool prefixOutputWithTimestamp = false;

  // Hosts (mutually exclusive).
  std::optional<std::string> hosts;
  std::optional<std::string> hostfile;
  std::optional<std::string> hostDiscoveryScript;

  // Controller (mutually exclusive); the config file's `controller` applies when kDefault.
  Controller controller = Controller::kDefault;

  // Hidden, for horovod.run(): on a failed job, the launcher writes the failure message here.
  std::optional<std::string> statusFile;

  bool elastic() const { return minNumProc.has_value() || hostDiscoveryScript.has_value(); }
};

}  // namespace hvd::launcher
