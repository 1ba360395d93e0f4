// Command-line parsing for horovodrun, with argparse's rules as Horovod uses them: options
// first, then the command (everything from the first non-option argument on, or after "--");
// long options accept "--name value" and "--name=value" and may be abbreviated to a unique
// prefix; "-p22"-style attached values work for one-letter options.
//
// Errors throw UsageError with argparse-like text ("argument -np/--num-proc: invalid int
// value: 'x'", "unrecognized arguments: --foo").
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace hvd::launcher {

inline constexpr const char* kVersion = "0.28.1";

Options parseCommandLine(const std::vector<std::string>& args);  // args without argv[0]

// Checks done after the config file is merged: required -np and command, value ranges
// ("--fusion-threshold-mb=-1 must be >= 0"), noise in [0, 1], cooldown range bounds.
void validateOptions(const Options& options);

// Horovod ignores the elastic-only flags (--max-np, --slots-per-host, --elastic-timeout,
// --reset-limit, --blacklist-cooldown-range) in a job that is not elastic (no --min-np, no
// discovery script), so config files and scripts pass them to fixed jobs: the warning to print
// for such a job, naming the flags given; empty when there are none or the job is elastic.
std::string ignoredElasticFlagsWarning(const Options& options);

// The -h text, grouped like Horovod's.
std::string usageText();
std::string shortUsage();

}  // namespace hvd::launcher
