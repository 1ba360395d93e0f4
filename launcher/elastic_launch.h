// The elastic launch path (--min-np or --host-discovery-script): like the built-in path
// (gloo_launch.h) but the hosts come from discovery, and workers are started, replaced and
// removed round by round by the ElasticDriver (elastic_driver.h). Remote hosts are checked over
// ssh when they first appear.
#pragma once

#include "options.h"

namespace hvd::launcher {

// Throws UsageError for inconsistent elastic options (e.g. -H with fewer than 2 hosts and no
// discovery script) before anything starts; returns the launcher's exit code otherwise.
int runElasticJob(const Options& options, int signalFd);

}  // namespace hvd::launcher
