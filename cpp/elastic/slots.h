// Hosts with slots, and the rank of each slot: what an elastic round is made of. The assignment
// is a pure function of (hosts in order, number of processes), so that the elastic driver can
// recompute it when hosts come and go and compare the result with the running workers.
#pragma once

#include <string>
#include <vector>

#include "common/placement.h"

namespace hvd::elastic {

struct HostSlots {
  std::string host;  // as the user (or the discovery) wrote it
  int slots = 0;
};

// One process of the job and its place in the topology.
struct SlotInfo : Placement {
  std::string hostname;  // as in HostSlots::host (HOROVOD_HOSTNAME)
};

// The sum of the hosts' slots, saturating at INT_MAX.
int totalSlots(const std::vector<HostSlots>& hosts);

// Ranks 0..np-1 on the first np slots: hosts in order, each host's slots filled consecutively;
// the placements follow hvd::placementsOnHosts. Precondition: np <= totalSlots(hosts).
std::vector<SlotInfo> fillSlots(const std::vector<HostSlots>& hosts, int np);

// The slots of workers whose hosts are hostOf[r] for rank r (where they landed).
std::vector<SlotInfo> slotsOnHosts(const std::vector<std::string>& hostOf);

}  // namespace hvd::elastic
