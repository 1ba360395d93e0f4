// Placement: where one process sits in the job (Horovod's rank, size, local_rank, local_size,
// cross_rank, cross_size), and the one rule that derives it from the hosts of the ranks.
#pragma once

#include <string>
#include <vector>

namespace hvd {

struct Placement {
  int rank = 0;
  int size = 1;
  int localRank = 0;   // index among the ranks on this host, in rank order
  int localSize = 1;   // ranks on this host
  int crossRank = 0;   // index of this host among the hosts that have a rank with this local rank
  int crossSize = 1;   // hosts that have a rank with this local rank

  bool operator==(const Placement&) const = default;
};

// The placement of every rank r of a job whose rank r runs on host hostOf[r]. Hosts count in the
// order of their lowest rank; a rank's local rank is its index among its host's ranks.
std::vector<Placement> placementsOnHosts(const std::vector<std::string>& hostOf);

}  // namespace hvd
