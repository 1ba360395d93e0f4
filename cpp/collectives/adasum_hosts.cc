#include "collectives/adasum_hosts.h"

#include <algorithm>

#include "collectives/adasum.h"
#include "collectives/collectives.h"

namespace hvd::collectives {
namespace {

// The members with this member's local index, one per host, as Adasum's ranks in host order.
class AcrossHosts final : public PairExchange {
 public:
  explicit AcrossHosts(Communicator& comm) : comm_(comm), hosts_(comm.hosts()) {}
  int rank() const override { return hosts_.host; }
  int size() const override { return hosts_.count; }
  void sendRecv(int peer, const void* send, size_t sendBytes, void* recv, size_t recvBytes) override {
    const int member = hosts_.members[static_cast<size_t>(peer)][static_cast<size_t>(hosts_.localRank)];
    comm_.sendRecv(member, send, sendBytes, member, recv, recvBytes, comm_.deadline());
  }

 private:
  Communicator& comm_;
  const Communicator::HostLayout& hosts_;
};

// This member's host: the holders of the other shards.
class HostShards final : public ShardGroup {
 public:
  explicit HostShards(Communicator& comm) : local_(comm.subset(comm.hosts().members[comm.hosts().host])) {}
  int size() const override { return local_.size(); }
  void allgather(const double* mine, size_t count, double* all) override {
    allgatherv(local_, mine, all, std::vector<size_t>(static_cast<size_t>(local_.size()), count * sizeof(double)));
  }

 private:
  Communicator& local_;
};

}  // namespace

std::string gpuAdasumUnsupported(const Communicator::HostLayout& hosts, int processSet) {
  if (!hosts.uniform) {
    std::string sizes;
    for (size_t h = 0; h < hosts.members.size(); ++h) {
      sizes += (h == 0 ? "" : ", ") + std::to_string(hosts.members[h].size());
    }
    return "Running GPU Adasum on heterogeneous cluster is not supported yet (process set " +
           std::to_string(processSet) + ": its hosts have " + sizes + " ranks).";
  }
  if (!adasumRankCountSupported(hosts.count)) {
    return "Running GPU Adasum with non-power of 2 nodes is not supported yet (process set " +
           std::to_string(processSet) + " is on " + std::to_string(hosts.count) + " hosts).";
  }
  return "";
}

size_t adasumShardLength(size_t total, int parts) {
  const size_t p = static_cast<size_t>(std::max(parts, 1));
  return (total + p - 1) / p;
}

std::vector<size_t> adasumShardCounts(const std::vector<size_t>& counts, size_t shard, int index) {
  const size_t begin = shard * static_cast<size_t>(index), end = begin + shard;
  std::vector<size_t> out;
  out.reserve(counts.size() + 1);
  size_t offset = 0, inside = 0;
  for (size_t c : counts) {
    const size_t lo = std::max(offset, begin), hi = std::min(offset + c, end);
    out.push_back(hi > lo ? hi - lo : 0);
    inside += out.back();
    offset += c;
  }
  out.push_back(shard - inside);
  return out;
}

void adasumAcrossHosts(Communicator& comm, void* shard, const std::vector<size_t>& shardCounts, DataType dtype,
                       std::vector<uint8_t>& scratch) {
  if (comm.hosts().count <= 1) return;
  AcrossHosts peers(comm);
  HostShards shards(comm);
  adasum(peers, shard, shardCounts, dtype, scratch, shards.size() > 1 ? &shards : nullptr);
}

}  // namespace hvd::collectives
