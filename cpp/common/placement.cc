#include "common/placement.h"

#include <map>

namespace hvd {

std::vector<Placement> placementsOnHosts(const std::vector<std::string>& hostOf) {
  const int size = static_cast<int>(hostOf.size());
  std::vector<Placement> out(hostOf.size());
  // Ranks per host, hosts in order of their lowest rank.
  std::map<std::string, int> hostIndex;
  std::vector<int> ranksOnHost;
  std::vector<int> hostOfRank(hostOf.size());
  for (int r = 0; r < size; ++r) {
    auto [it, added] = hostIndex.emplace(hostOf[r], static_cast<int>(ranksOnHost.size()));
    if (added) ranksOnHost.push_back(0);
    hostOfRank[r] = it->second;
    out[r].localRank = ranksOnHost[it->second]++;
  }
  // Hosts with a rank of local rank l, in host order: hostsWithLocal[l] so far.
  std::vector<int> hostsWithLocal;
  std::vector<std::vector<int>> crossRank(ranksOnHost.size());
  for (size_t h = 0; h < ranksOnHost.size(); ++h) {
    for (int l = 0; l < ranksOnHost[h]; ++l) {
      if (static_cast<int>(hostsWithLocal.size()) <= l) hostsWithLocal.push_back(0);
      crossRank[h].push_back(hostsWithLocal[l]++);
    }
  }
  for (int r = 0; r < size; ++r) {
    Placement& p = out[r];
    const int h = hostOfRank[r];
    p.rank = r;
    p.size = size;
    p.localSize = ranksOnHost[h];
    p.crossRank = crossRank[h][p.localRank];
    p.crossSize = hostsWithLocal[p.localRank];
  }
  return out;
}

}  // namespace hvd
