// Where an elastic job's hosts come from: a fixed list (-H / --hostfile with --min-np: fault
// tolerance without scaling) or the user's discovery script, run every interval. The driver asks
// discover() each tick; a Discovery decides itself when to run the script again.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"

namespace hvd::launcher {

class Discovery {
 public:
  virtual ~Discovery() = default;
  // The current hosts (in the order the source lists them), or nullopt when nothing new was
  // learned since the last call (not due yet, or the script failed after its first success: the
  // failure is logged and the previous answer stands).
  virtual std::optional<std::vector<HostSlots>> discover(std::chrono::steady_clock::time_point now) = 0;
};

// The same hosts every time (reported on the first call only).
std::unique_ptr<Discovery> fixedDiscovery(std::vector<HostSlots> hosts);

// Runs `script` (through /bin/sh -c, so a path with arguments works) every `interval`, each run
// bounded by `runTimeout` (then SIGKILLed and counted as a failure). Its stdout lists one
// "host" or "host:slots" per line; bare names get `defaultSlots`. The first run must succeed:
// otherwise LaunchError "Failed to execute discovery script: <script>. Exit code: <c>" (and a
// bad line is a UsageError naming it, first run or later).
std::unique_ptr<Discovery> scriptDiscovery(std::string script, int defaultSlots, std::chrono::milliseconds interval,
                                           std::chrono::milliseconds runTimeout, bool verbose);

}  // namespace hvd::launcher
