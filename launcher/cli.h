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

// The -h text, grouped like Horovod's.
std::string usageText();
std::string shortUsage();

}  // namespace hvd::launcher
