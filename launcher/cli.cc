#include "cli.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <sstream>
#include <utility>

namespace hvd::launcher {
namespace {

using Values = std::vector<std::string>;

// One option: its spellings, how many values it takes, and what it does to Options.
struct OptionSpec {
  std::vector<std::string> names;
  int nargs;
  const char* metavar;  // shown in help for options with values
  const char* group;
  const char* help;  // nullptr: hidden from -h (argparse.SUPPRESS)
  std::function<void(Options&, const Values&, const std::string& display)> apply;
  // Options in one exclusive group may not be combined.
  const char* exclusiveGroup = nullptr;
};

std::string display(const OptionSpec& spec) {
  std::string out;
  for (const auto& n : spec.names) out += (out.empty() ? "" : "/") + n;
  return out;
}

[[noreturn]] void invalid(const std::string& display, const char* type, const std::string& value) {
  throw UsageError("argument " + display + ": invalid " + type + " value: '" + value + "'");
}

int64_t toInt(const std::string& display, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') invalid(display, "int", text);
  return v;
}

double toFloat(const std::string& display, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0') invalid(display, "float", text);
  return v;
}

// Setters for the common shapes.
template <typename T>
auto setInt(std::optional<T> Options::* field) {
  return [field](Options& o, const Values& v, const std::string& d) {
    int64_t value = toInt(d, v[0]);
    // Not truncated: -np 4294967297 must not become 1.
    if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) invalid(d, "int", v[0]);
    o.*field = static_cast<T>(value);
  };
}
auto setFloat(std::optional<double> Options::* field) {
  return [field](Options& o, const Values& v, const std::string& d) { o.*field = toFloat(d, v[0]); };
}
auto setString(std::optional<std::string> Options::* field) {
  return [field](Options& o, const Values& v, const std::string&) { o.*field = v[0]; };
}
auto setBool(std::optional<bool> Options::* field, bool value) {
  return [field, value](Options& o, const Values&, const std::string&) { o.*field = value; };
}
// A deprecated spelling: warns as Horovod's make_deprecated_bool_action does, then sets the value.
auto setDeprecatedBool(std::optional<bool> Options::* field, bool value, const char* replacement) {
  return [field, value, replacement](Options& o, const Values&, const std::string& d) {
    std::cerr << "horovodrun: DeprecationWarning: Argument " << d << " has been replaced by " << replacement
              << " and will be removed in v0.21.0\n";
    o.*field = value;
  };
}
auto setFlag(bool Options::* field) {
  return [field](Options& o, const Values&, const std::string&) { o.*field = true; };
}
auto setController(Controller c) {
  return [c](Options& o, const Values&, const std::string&) { o.controller = c; };
}

std::vector<std::string> splitComma(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

const char* kGeneral = "optional arguments";
const char* kSsh = "SSH arguments";
const char* kTunable = "tuneable parameter arguments";
const char* kAutotune = "autotune arguments";
const char* kElastic = "elastic arguments";
const char* kTimeline = "timeline arguments";
const char* kStall = "stall check arguments";
const char* kLibrary = "library arguments";
const char* kLogging = "logging arguments";
const char* kHosts = "host arguments";
const char* kController = "controller arguments";

// A boolean setting with a flag for each value, as Horovod declares them (an argparse mutually
// exclusive group of make_override_true_action / make_override_false_action): the two flags may
// not be combined, and either one, given anywhere on the command line, wins over --config-file's
// value for the setting (applyConfigFile only fills settings the command line left unset).
// `on` sets the field to true, `off` to false. Horovod hides one of the two from -h
// (argparse.SUPPRESS); this launcher lists both.
struct BoolPair {
  const char* on;
  const char* off;
  std::optional<bool> Options::* field;
  const char* group;
  const char* onHelp;
  const char* offHelp;
  bool offFirst = false;  // list `off` first (--no-stall-check is the documented one)
};

void addBoolPair(std::vector<OptionSpec>& table, const BoolPair& p) {
  OptionSpec on{{p.on}, 0, nullptr, p.group, p.onHelp, setBool(p.field, true), p.on};
  OptionSpec off{{p.off}, 0, nullptr, p.group, p.offHelp, setBool(p.field, false), p.on};
  if (p.offFirst) std::swap(on, off);
  table.push_back(std::move(on));
  table.push_back(std::move(off));
}

const std::vector<OptionSpec>& optionTable() {
  static const std::vector<OptionSpec> table = [] {
    std::vector<OptionSpec> t;
    auto add = [&t](std::initializer_list<OptionSpec> specs) { t.insert(t.end(), specs.begin(), specs.end()); };
    auto pair = [&t](const BoolPair& p) { addBoolPair(t, p); };

    // The table is laid out by hand (a row per option, its help text on the line it reads best).
    // clang-format off

    // General.
    add({
        {{"-h", "--help"}, 0, nullptr, kGeneral, "show this help message and exit", setFlag(&Options::help)},
        {{"-v", "--version"}, 0, nullptr, kGeneral, "print the Horovod version and exit", setFlag(&Options::version)},
        {{"-np", "--num-proc"}, 1, "NP", kGeneral,
         "total number of worker processes (elastic: processes needed before training starts)",
         setInt(&Options::numProc)},
        {{"-cb", "--check-build"}, 0, nullptr, kGeneral,
         "print which frameworks, controllers and tensor operations this build supports, then exit",
         setFlag(&Options::checkBuild)},
        {{"--disable-cache"}, 0, nullptr, kGeneral,
         "re-run the ssh checks instead of trusting results cached (up to 60 minutes) in ~/.horovod",
         setFlag(&Options::disableCache)},
        {{"--start-timeout"}, 1, "START_TIMEOUT", kGeneral,
         "seconds allowed for the ssh checks and for starting the workers (default: $HOROVOD_START_TIMEOUT or 30)",
         setFloat(&Options::startTimeout)},
        {{"--network-interfaces"}, 1, "NICS", kGeneral,
         "comma-separated network interfaces to use for communication (default: detected)",
         [](Options& o, const Values& v, const std::string&) {
           for (auto& nic : splitComma(v[0])) o.networkInterfaces.push_back(nic);
         }},
        {{"--network-interface"}, 1, "NIC", kGeneral,
         "one network interface to use; repeat the option for several",
         [](Options& o, const Values& v, const std::string&) {
           auto nics = splitComma(v[0]);
           if (nics.size() > 1) {
             std::cerr << "horovodrun: DeprecationWarning: a comma-separated list in --network-interface is "
                          "deprecated; use --network-interfaces or repeat --network-interface\n";
           }
           for (auto& nic : nics) o.networkInterfaces.push_back(nic);
         }},
        {{"--output-filename"}, 1, "OUTPUT_FILENAME", kGeneral,
         "also write each rank's output to <dir>/rank.<r>/stdout and <dir>/rank.<r>/stderr",
         setString(&Options::outputFilename)},
        {{"--verbose"}, 0, nullptr, kGeneral, "print what the launcher does, including the commands it runs",
         setFlag(&Options::verbose)},
        {{"--config-file"}, 1, "CONFIG_FILE", kGeneral,
         "YAML file with parameter values; options given on the command line take precedence",
         setString(&Options::configFile)},
        {{"--status-file"}, 1, "STATUS_FILE", kGeneral, nullptr, setString(&Options::statusFile)},
    });

    // SSH.
    add({
        {{"-p", "--ssh-port"}, 1, "SSH_PORT", kSsh, "ssh port on all the hosts", setInt(&Options::sshPort)},
        {{"-i", "--ssh-identity-file"}, 1, "SSH_IDENTITY_FILE", kSsh, "ssh private key file (identity)",
         setString(&Options::sshIdentityFile)},
        {{"--remote-launcher"}, 1, "{ssh,blaunch}", kSsh,
         "how to start workers on remote hosts (default: blaunch inside an LSF job with blaunch on PATH and no "
         "--ssh-port/--ssh-identity-file, else ssh)",
         setString(&Options::remoteLauncher)},
    });

    // Tunables.
    add({
        {{"--fusion-threshold-mb"}, 1, "FUSION_THRESHOLD_MB", kTunable,
         "fusion buffer size in MB; 0 disables tensor fusion (default: 128)", setInt(&Options::fusionThresholdMb)},
        {{"--cycle-time-ms"}, 1, "CYCLE_TIME_MS", kTunable,
         "Horovod's cycle time, exported as HOROVOD_CYCLE_TIME; this engine has no cycle (it wakes on work), so "
         "rank 0 warns that it has no effect (its batching window is HOROVOD_BURST_QUIET_US)",
         setFloat(&Options::cycleTimeMs)},
        {{"--cache-capacity"}, 1, "CACHE_CAPACITY", kTunable,
         "number of entries in the response cache; 0 disables it (default: 1024)", setInt(&Options::cacheCapacity)},
    });
    pair({"--hierarchical-allreduce", "--no-hierarchical-allreduce", &Options::hierarchicalAllreduce, kTunable,
          "allreduce within each host first, then across hosts (config: params.hierarchical_allreduce)",
          "explicitly disable hierarchical allreduce, so autotuning leaves it off"});
    pair({"--hierarchical-allgather", "--no-hierarchical-allgather", &Options::hierarchicalAllgather, kTunable,
          "allgather within each host first, then across hosts (config: params.hierarchical_allgather)",
          "explicitly disable hierarchical allgather, so autotuning leaves it off"});
    pair({"--torus-allreduce", "--no-torus-allreduce", &Options::torusAllreduce, kTunable,
          "use the two-dimensional torus allreduce (NCCL) (config: params.torus_allreduce)",
          "explicitly disable the torus allreduce, so autotuning leaves it off"});

    // Autotune.
    pair({"--autotune", "--no-autotune", &Options::autotune, kAutotune,
          "tune the fusion threshold, batching, spin/park, algorithm crossover and cache while training "
          "(config: autotune.enabled)",
          "do not autotune, even if the config file enables it (exports HOROVOD_AUTOTUNE=0)"});
    add({
        {{"--autotune-log-file"}, 1, "AUTOTUNE_LOG_FILE", kAutotune, "CSV file recording every autotune sample",
         setString(&Options::autotuneLogFile)},
        {{"--autotune-warmup-samples"}, 1, "AUTOTUNE_WARMUP_SAMPLES", kAutotune,
         "samples discarded at the start of autotuning (default: 3)", setInt(&Options::autotuneWarmupSamples)},
        {{"--autotune-steps-per-sample"}, 1, "AUTOTUNE_STEPS_PER_SAMPLE", kAutotune,
         "steps measured per autotune sample (default: 10)", setInt(&Options::autotuneStepsPerSample)},
        {{"--autotune-bayes-opt-max-samples"}, 1, "AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kAutotune,
         "Bayesian optimization samples before settling (default: 20)",
         setInt(&Options::autotuneBayesOptMaxSamples)},
        {{"--autotune-gaussian-process-noise"}, 1, "AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kAutotune,
         "noise (alpha) of the Gaussian process, in [0, 1] (default: 0.8)",
         setFloat(&Options::autotuneGaussianProcessNoise)},
    });

    // Elastic.
    add({
        {{"--min-np", "--min-num-proc"}, 1, "MIN_NP", kElastic,
         "minimum processes; training pauses below it (makes the run elastic)", setInt(&Options::minNumProc)},
        {{"--max-np", "--max-num-proc"}, 1, "MAX_NP", kElastic, "maximum processes", setInt(&Options::maxNumProc)},
        {{"--slots-per-host"}, 1, "SLOTS", kElastic,
         "slots for discovered hosts that do not state a slot count", setInt(&Options::slotsPerHost)},
        {{"--elastic-timeout"}, 1, "ELASTIC_TIMEOUT", kElastic,
         "seconds to wait for enough slots after a change (default: $HOROVOD_ELASTIC_TIMEOUT or 600)",
         setFloat(&Options::elasticTimeout)},
        {{"--reset-limit"}, 1, "RESET_LIMIT", kElastic, "maximum number of resets before the job fails",
         setInt(&Options::resetLimit)},
        {{"--blacklist-cooldown-range"}, 2, "COOLDOWN_RANGE", kElastic,
         "MIN MAX seconds a failed host stays blacklisted (default: forever)",
         [](Options& o, const Values& v, const std::string& d) {
           o.blacklistCooldownRange = {static_cast<int>(toInt(d, v[0])), static_cast<int>(toInt(d, v[1]))};
         }},
    });

    // Timeline.
    add({
        {{"--timeline-filename"}, 1, "TIMELINE_FILENAME", kTimeline,
         "write a Chrome-trace timeline of every operation to this file", setString(&Options::timelineFilename)},
    });
    pair({"--timeline-mark-cycles", "--no-timeline-mark-cycles", &Options::timelineMarkCycles, kTimeline,
          "mark background cycles in the timeline (config: timeline.mark_cycles)",
          "do not mark cycles, even if the config file asks to"});

    // Stall check.
    pair({"--stall-check", "--no-stall-check", &Options::stallCheck, kStall,
          "enable the stall check, even if the config file disables it (exports HOROVOD_STALL_CHECK_DISABLE=0)",
          "disable the check for ranks that stall (config: stall_check.enabled: false)", true});
    add({
        {{"--stall-check-warning-time-seconds"}, 1, "STALL_CHECK_WARNING_TIME_SECONDS", kStall,
         "seconds before a stalled tensor is reported (default: 60)",
         setInt(&Options::stallCheckWarningTimeSeconds)},
        {{"--stall-check-shutdown-time-seconds"}, 1, "STALL_CHECK_SHUTDOWN_TIME_SECONDS", kStall,
         "seconds after which a stall shuts the job down; must exceed the warning time (default: 0, never)",
         setInt(&Options::stallCheckShutdownTimeSeconds)},
    });

    // Library.
    pair({"--mpi-threads-disable", "--no-mpi-threads-disable", &Options::mpiThreadsDisable, kLibrary,
          "initialize MPI with MPI_THREAD_SINGLE (config: library_options.mpi_threads_disable)",
          "keep MPI's thread support, even if the config file disables it"});
    add({
        {{"--mpi-args"}, 1, "MPI_ARGS", kLibrary, "extra arguments for mpirun (use the --mpi-args=\"...\" form)",
         setString(&Options::mpiArgs)},
        {{"--tcp"}, 0, nullptr, kLibrary, "TCP instead of InfiniBand: NCCL_IB_DISABLE=1 for NCCL, -tcp for Spectrum MPI (--mpi, --jsrun); the CPU "
         "data plane is TCP between hosts either way", setFlag(&Options::tcp)},
        {{"--binding-args"}, 1, "BINDING_ARGS", kLibrary,
         "process binding arguments for mpirun (default: -bind-to none -map-by slot)",
         setString(&Options::bindingArgs)},
        {{"--num-nccl-streams"}, 1, "NUM_NCCL_STREAMS", kLibrary, "NCCL streams per device (default: 1)",
         setInt(&Options::numNcclStreams)},
        {{"--thread-affinity"}, 1, "THREAD_AFFINITY", kLibrary, "pin the background thread to this core",
         setInt(&Options::threadAffinity)},
        {{"--gloo-timeout-seconds"}, 1, "GLOO_TIMEOUT_SECONDS", kLibrary,
         "rendezvous and collective timeout of the Gloo controller (default: 30)",
         setInt(&Options::glooTimeoutSeconds)},
    });

    // Logging. The four timestamp spellings form one exclusive group, as in Horovod; two are
    // the deprecated pre-0.21 names.
    add({
        {{"--log-level"}, 1, "{TRACE,DEBUG,INFO,WARNING,ERROR,FATAL}", kLogging,
         "minimum severity of core log messages (default: WARNING)",
         [](Options& o, const Values& v, const std::string& d) {
           static const char* kLevels[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
           for (const char* level : kLevels) {
             if (v[0] == level) {
               o.logLevel = v[0];
               return;
             }
           }
           throw UsageError("argument " + d + ": invalid choice: '" + v[0] +
                            "' (choose from 'TRACE', 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'FATAL')");
         }},
        {{"--log-with-timestamp"}, 0, nullptr, kLogging,
         "timestamp core log messages, even if the config file hides the time (exports HOROVOD_LOG_HIDE_TIME=0)",
         setBool(&Options::logWithTimestamp, true), "log-timestamp"},
        {{"--log-without-timestamp"}, 0, nullptr, kLogging,
         "leave timestamps out of core log messages (config: logging.with_timestamp: false)",
         setBool(&Options::logWithTimestamp, false), "log-timestamp"},
        {{"--log-hide-timestamp"}, 0, nullptr, kLogging, "deprecated spelling of --log-without-timestamp",
         setDeprecatedBool(&Options::logWithTimestamp, false, "--log-without-timestamp"), "log-timestamp"},
        {{"--no-log-hide-timestamp"}, 0, nullptr, kLogging, "deprecated spelling of --log-with-timestamp",
         setDeprecatedBool(&Options::logWithTimestamp, true, "--log-with-timestamp"), "log-timestamp"},
        {{"-prefix-timestamp", "--prefix-output-with-timestamp"}, 0, nullptr, kLogging,
         "prefix every forwarded output line of the workers with the time",
         setFlag(&Options::prefixOutputWithTimestamp)},
    });

    // Hosts.
    add({
        {{"-H", "--hosts"}, 1, "HOSTS", kHosts,
         "hosts and slots, e.g. host1:2,host2:4 (default: localhost:<np>)", setString(&Options::hosts), "hosts"},
        {{"-hostfile", "--hostfile"}, 1, "HOSTFILE", kHosts,
         "file with one '<hostname> slots=<n>' per line", setString(&Options::hostfile), "hosts"},
        {{"--host-discovery-script"}, 1, "HOST_DISCOVERY_SCRIPT", kHosts,
         "executable printing the available hosts, one 'host[:slots]' per line (elastic)",
         setString(&Options::hostDiscoveryScript), "hosts"},
    });

    // Controller.
    add({
        {{"--gloo"}, 0, nullptr, kController, "use the built-in (Gloo-compatible) launcher and controller",
         setController(Controller::kGloo), "controller"},
        {{"--mpi"}, 0, nullptr, kController, "launch with mpirun", setController(Controller::kMpi), "controller"},
        {{"--jsrun"}, 0, nullptr, kController, "launch with jsrun, inside an IBM LSF job (hosts and -np from the allocation unless given)",
         setController(Controller::kJsrun), "controller"},
    });
    // clang-format on
    return t;
  }();
  return table;
}

bool looksLikeNegativeNumber(const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-') return false;
  char* end = nullptr;
  std::strtod(arg.c_str(), &end);
  return *end == '\0';
}

// Finds the option for `name` (exact, then unique long prefix as argparse's allow_abbrev).
const OptionSpec* findOption(const std::string& name) {
  const auto& table = optionTable();
  for (const auto& spec : table) {
    for (const auto& n : spec.names) {
      if (n == name) return &spec;
    }
  }
  if (name.rfind("--", 0) != 0) return nullptr;
  const OptionSpec* match = nullptr;
  std::vector<std::string> candidates;
  for (const auto& spec : table) {
    for (const auto& n : spec.names) {
      if (n.rfind("--", 0) == 0 && n.rfind(name, 0) == 0) {
        if (match != &spec) candidates.push_back(n);
        match = &spec;
      }
    }
  }
  if (candidates.size() > 1) {
    std::string list;
    for (const auto& c : candidates) list += (list.empty() ? "" : ", ") + c;
    throw UsageError("ambiguous option: " + name + " could match " + list);
  }
  return match;
}

}  // namespace

Options parseCommandLine(const std::vector<std::string>& args) {
  Options options;
  std::vector<std::pair<const char*, const OptionSpec*>> exclusiveSeen;
  size_t i = 0;
  while (i < args.size()) {
    const std::string& arg = args[i];
    if (arg == "--") {
      options.command.assign(args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-' || looksLikeNegativeNumber(arg)) {
      // The first positional argument starts the command (argparse REMAINDER).
      options.command.assign(args.begin() + i, args.end());
      break;
    }
    std::string name = arg;
    std::optional<std::string> attached;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      attached = arg.substr(eq + 1);
    }
    const OptionSpec* spec = findOption(name);
    if (spec == nullptr && arg[1] != '-' && arg.size() > 2) {
      // "-p22": a one-letter option with its value attached.
      spec = findOption(arg.substr(0, 2));
      if (spec != nullptr && spec->nargs == 1) {
        attached = arg.substr(2);
      } else {
        spec = nullptr;
      }
    }
    if (spec == nullptr) throw UsageError("unrecognized arguments: " + arg);
    std::string shown = display(*spec);
    ++i;
    Values values;
    if (attached.has_value()) {
      if (spec->nargs != 1) throw UsageError("argument " + shown + ": ignored explicit argument '" + *attached + "'");
      values.push_back(*attached);
    } else {
      for (int k = 0; k < spec->nargs; ++k) {
        if (i >= args.size()) {
          throw UsageError(
              "argument " + shown + ": expected " +
              (spec->nargs == 1 ? std::string("one argument") : std::to_string(spec->nargs) + " arguments"));
        }
        values.push_back(args[i++]);
      }
    }
    if (spec->exclusiveGroup != nullptr) {
      for (const auto& [group, other] : exclusiveSeen) {
        if (std::string(group) == spec->exclusiveGroup && other != spec) {
          throw UsageError("argument " + shown + ": not allowed with argument " + display(*other));
        }
      }
      exclusiveSeen.emplace_back(spec->exclusiveGroup, spec);
    }
    spec->apply(options, values, shown);
  }
  return options;
}

namespace {

template <typename T>
void requireNonNegative(const char* name, const std::optional<T>& value) {
  if (value.has_value() && *value < 0) {
    std::ostringstream out;
    out << name << "=" << *value << " must be >= 0";
    throw UsageError(out.str());
  }
}

}  // namespace

void validateOptions(const Options& o) {
  if (o.help || o.version || o.checkBuild) return;
  // Under LSF, --jsrun takes -np from the allocation (lsf_launch.h).
  const bool inLsf = std::getenv("LSB_JOBID") != nullptr && *std::getenv("LSB_JOBID") != '\0';
  if (!o.numProc.has_value() && !o.elastic() && !(o.controller == Controller::kJsrun && inLsf)) {
    throw UsageError("the following arguments are required: -np/--num-proc");
  }
  if (o.numProc.has_value() && *o.numProc < 1) {
    throw UsageError("argument -np/--num-proc: must be at least 1, got " + std::to_string(*o.numProc));
  }
  if (o.command.empty()) throw UsageError("the following arguments are required: command");
  if (o.controller == Controller::kJsrun && !inLsf) {
    throw UsageError(
        "Horovod did not detect an LSF job.  The jsrun launcher can only be used in that environment. "
        "Please, pick a different launcher for other environments.");
  }
  requireNonNegative("fusion_threshold_mb", o.fusionThresholdMb);
  requireNonNegative("cycle_time_ms", o.cycleTimeMs);
  requireNonNegative("cache_capacity", o.cacheCapacity);
  requireNonNegative("autotune_warmup_samples", o.autotuneWarmupSamples);
  requireNonNegative("autotune_steps_per_sample", o.autotuneStepsPerSample);
  requireNonNegative("autotune_bayes_opt_max_samples", o.autotuneBayesOptMaxSamples);
  requireNonNegative("autotune_gaussian_process_noise", o.autotuneGaussianProcessNoise);
  requireNonNegative("stall_check_warning_time_seconds", o.stallCheckWarningTimeSeconds);
  requireNonNegative("stall_check_shutdown_time_seconds", o.stallCheckShutdownTimeSeconds);
  requireNonNegative("num_nccl_streams", o.numNcclStreams);
  requireNonNegative("thread_affinity", o.threadAffinity);
  requireNonNegative("gloo_timeout_seconds", o.glooTimeoutSeconds);
  requireNonNegative("start_timeout", o.startTimeout);
  requireNonNegative("elastic_timeout", o.elasticTimeout);
  requireNonNegative("ssh_port", o.sshPort);
  if (o.remoteLauncher.has_value() && *o.remoteLauncher != "ssh" && *o.remoteLauncher != "blaunch") {
    throw UsageError("argument --remote-launcher: invalid choice: '" + *o.remoteLauncher +
                     "' (choose from 'ssh', 'blaunch')");
  }
  requireNonNegative("reset_limit", o.resetLimit);
  if (o.sshPort.has_value() && *o.sshPort > 65535) {
    throw UsageError("ssh_port=" + std::to_string(*o.sshPort) + " must be a port number (1 to 65535)");
  }
  if (o.autotuneGaussianProcessNoise.has_value() && *o.autotuneGaussianProcessNoise > 1.0) {
    std::ostringstream out;
    out << "autotune_gaussian_process_noise=" << *o.autotuneGaussianProcessNoise << " must be in [0, 1]";
    throw UsageError(out.str());
  }
  if (o.blacklistCooldownRange.has_value()) {
    auto [lo, hi] = *o.blacklistCooldownRange;
    if (lo < 1 || hi > 3600 || lo > hi) {
      throw UsageError("--blacklist-cooldown-range " + std::to_string(lo) + " " + std::to_string(hi) +
                       ": need 1 <= MIN <= MAX <= 3600 seconds");
    }
  }
  if (o.minNumProc.has_value() && o.numProc.has_value() && *o.minNumProc > *o.numProc) {
    throw UsageError("--min-np (" + std::to_string(*o.minNumProc) + ") must not exceed -np (" +
                     std::to_string(*o.numProc) + ")");
  }
}

std::string ignoredElasticFlagsWarning(const Options& o) {
  if (o.elastic()) return "";
  std::vector<const char*> given;
  if (o.maxNumProc.has_value()) given.push_back("--max-np");
  if (o.slotsPerHost.has_value()) given.push_back("--slots-per-host");
  if (o.elasticTimeout.has_value()) given.push_back("--elastic-timeout");
  if (o.resetLimit.has_value()) given.push_back("--reset-limit");
  if (o.blacklistCooldownRange.has_value()) given.push_back("--blacklist-cooldown-range");
  if (given.empty()) return "";
  std::string names;
  for (size_t i = 0; i < given.size(); ++i) names += std::string(i == 0 ? "" : ", ") + given[i];
  return "horovodrun: warning: " + names + (given.size() == 1 ? " is" : " are") +
         " ignored: this job is not elastic (add --min-np or --host-discovery-script to make it elastic; "
         "docs/elastic.md)\n";
}

std::string shortUsage() {
  return "usage: horovodrun [-h] [-v] -np NP [-cb] [options] [-H HOSTS | -hostfile HOSTFILE | "
         "--host-discovery-script SCRIPT] [--gloo | --mpi | --jsrun] command [args ...]\n";
}

std::string usageText() {
  constexpr size_t kColumn = 34;
  constexpr size_t kWidth = 100;
  std::ostringstream out;
  out << shortUsage() << "\nHorovod Runner: launch distributed training processes (v" << kVersion << ")\n";
  out << "\npositional arguments:\n  command" << std::string(kColumn - 9, ' ')
      << "the program to run on every slot, with its arguments\n";
  std::vector<std::string> groups;
  for (const auto& spec : optionTable()) {
    bool known = false;
    for (const auto& g : groups) known = known || g == spec.group;
    if (!known) groups.push_back(spec.group);
  }
  for (const auto& group : groups) {
    out << "\n" << group << ":\n";
    for (const auto& spec : optionTable()) {
      if (spec.group != group || spec.help == nullptr) continue;
      std::string left = "  ";
      for (size_t k = 0; k < spec.names.size(); ++k) {
        if (k > 0) left += ", ";
        left += spec.names[k];
        if (spec.nargs >= 1) left += std::string(" ") + spec.metavar;
        if (spec.nargs == 2) left += std::string(" ") + spec.metavar;
      }
      // Wrap the help text at kWidth, indented to kColumn.
      std::string help = spec.help;
      std::vector<std::string> lines;
      std::string line;
      std::istringstream words(help);
      std::string word;
      while (words >> word) {
        if (!line.empty() && kColumn + line.size() + 1 + word.size() > kWidth) {
          lines.push_back(line);
          line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
      }
      if (!line.empty()) lines.push_back(line);
      if (left.size() + 2 > kColumn) {
        out << left << "\n";
        left.clear();
      }
      for (size_t k = 0; k < lines.size(); ++k) {
        std::string prefix = k == 0 ? left : "";
        out << prefix << std::string(kColumn - prefix.size(), ' ') << lines[k] << "\n";
      }
    }
  }
  return out.str();
}

}  // namespace hvd::launcher
