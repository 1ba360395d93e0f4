// The one rule that derives each rank's Placement (horovod/types.h) from the hosts of the ranks.
#pragma once

#include <string>
#include <vector>

#include "horovod/types.h"

namespace hvd {

// The placement of every rank r of a job whose rank r runs on host hostOf[r]. Hosts count in the
// order of their lowest rank; a rank's local rank is its index among its host's ranks.
std::vector<Placement> placementsOnHosts(const std::vector<std::string>& hostOf);

}  // namespace hvd
