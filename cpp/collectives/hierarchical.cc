// Hierarchical collectives: shared memory inside each host, point-to-point across hosts.
//
// Placement comes from Communicator::hosts(). "Local rank i" is a member's index among its
// host's members; with equally many members per host, the members with local rank i on every
// host form the cross-host group i (Communicator::subset), which the cross-host stages use.
#include "collectives/hierarchical.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/reduce_kernels.h"
#include "common/check.h"
#include "common/logging.h"

namespace hvd::collectives {
namespace {

// Elements are reduced in tiles that stay in L1 while the host's inputs are folded into them.
constexpr size_t kTileBytes = 16 << 10;
// Upper bound on one chunk of the allreduce (each chunk costs two host barriers and one
// cross-host allreduce of chunk / localSize bytes per local rank).
constexpr size_t kChunkBytes = size_t(4) << 20;

// Half-buffer bytes every multi-member host can use (0 = hierarchical algorithms cannot run),
// agreed once by all members: MIN over members of their host space's usable half, through
// recursive doubling (members alone on their host do not constrain it).
size_t agreedBytes(Communicator& comm) {
  auto& agreed = comm.hierarchicalBytes();
  if (agreed) return *agreed;
  const auto& hosts = comm.hosts();
  if (hosts.count <= 1 || hosts.maxLocalSize <= 1) {
    agreed = 0;
    return 0;
  }
  constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  int64_t mine = kNoLimit;
  if (hosts.localSize() > 1) {
    SharedSpace* space = comm.hostSharedSpace(comm.deadline());
    const bool usable = sharedUsable(space, hosts.localSize()) && space->memberIndex() == hosts.localRank;
    mine = usable ? static_cast<int64_t>(sharedHalfBytes(*space)) : 0;
  }
  const ReduceKernel& kernel = reduceKernel(DataType::kInt64, ReduceOp::kMin);
  allreduceRecursiveDoubling(AllreduceArgs{comm, &mine, &mine, 1, DataType::kInt64, kernel, nullptr});
  agreed = mine == kNoLimit ? 0 : static_cast<size_t>(mine);
  HVD_LOG(Debug) << "collectives: " << comm.size() << " members on " << hosts.count << " hosts"
                 << (hosts.uniform ? " (" + std::to_string(hosts.localSize()) + " each)" : " (uneven)")
                 << (*agreed > 0 ? ": hierarchical algorithms enabled, " + std::to_string(*agreed) + " shared bytes"
                                 : ": hierarchical algorithms off (a host lacks usable shared memory)");
  return *agreed;
}

// Set ranks with this rank's local rank on every host (uniform placement), ascending.
std::vector<int> crossGroup(const Communicator::HostLayout& hosts) {
  std::vector<int> group;
  for (const auto& members : hosts.members) group.push_back(members[hosts.localRank]);
  std::sort(group.begin(), group.end());
  return group;
}

SharedSpace& hostSpace(Communicator& comm) {
  SharedSpace* space = comm.hostSharedSpace(comm.deadline());
  HVD_CHECK(space != nullptr) << "hierarchical collective without a host SharedSpace";
  HVD_CHECK_EQ(space->memberIndex(), comm.hosts().localRank) << "host shared space members differ from the host";
  return *space;
}

}  // namespace

bool hierarchicalUsable(Communicator& comm, bool uniform) {
  const auto& hosts = comm.hosts();
  if (hosts.count <= 1 || hosts.maxLocalSize <= 1) return false;
  if (uniform && !hosts.uniform) return false;
  return agreedBytes(comm) > 0;
}

namespace {

// Step 2 of a chunk: this rank's slice of chunk c (local rank `me` of `m`) reduced over the
// host's members in local-rank order into `mine` (this rank's half); its own part comes from
// `source`, its private input at the chunk's offset.
void reduceOwnSliceOnHost(const AllreduceArgs& args, SharedSpace& space, const Chunk& c, int me, int m,
                          const uint8_t* source, uint8_t* mine) {
  const size_t elem = args.kernel.elementSize;
  const size_t tileElems = kTileBytes / elem;
  const Block own = c.slice(me);
  for (size_t t = own.begin; t < own.begin + own.size; t += tileElems) {
    const size_t len = std::min(tileElems, own.begin + own.size - t);
    auto input = [&](int j) -> const uint8_t* {
      return j == me ? source + t * elem : sharedHalf(space, j, c.phase) + t * elem;
    };
    args.kernel.to(mine + t * elem, input(0), input(1), len);
    for (int j = 2; j < m; ++j) args.kernel.into(mine + t * elem, input(j), len);
  }
}

// Step 3: the slice allreduced in place by this rank's cross-host group and scaled, before the
// host's other members copy it.
void allreduceSliceAcrossHosts(const AllreduceArgs& args, Communicator& cross, uint8_t* slice, size_t count) {
  const AllreduceAlgorithm& algo = chooseAllreduce("", count * args.kernel.elementSize, cross.size(), false, false);
  algo.run(AllreduceArgs{cross, slice, slice, count, args.dtype, args.kernel, nullptr});
  scaleBuffer(slice, count, args.dtype, args.postscale);
}

}  // namespace

// Per chunk (at most the agreed half, one slice geometry for the whole call as in shm_slices):
//  1. every local rank publishes the chunk, except its own slice, in its buffer; host barrier;
//  2. local rank i reduces slice i over the host's members in local-rank order (its own part read
//     from its private input) into its own buffer's slice i;
//  3. cross-host group i allreduces slice i in place there (recursive doubling or ring by size);
//     the result goes to the output, and stays in the buffer for the other local ranks;
//  4. the other local ranks copy slice i out after the next chunk's barrier (pipelined: one
//     barrier per chunk plus a last one).
// Every element is reduced by one cross-host group, whose algorithms leave identical bits on its
// members, then copied: bitwise identical results everywhere. The double-buffering argument is
// shm_slices' (allreduce_shared.cc): the cross-host step only writes this rank's own slice.
void allreduceHierarchical(const AllreduceArgs& args) {
  Communicator& comm = args.comm;
  const auto& hosts = comm.hosts();
  SharedSpace& space = hostSpace(comm);
  const size_t agreed = agreedBytes(comm);
  HVD_CHECK(agreed > 0 && hosts.uniform) << "hierarchical allreduce on an unsuitable placement";
  Communicator& cross = comm.subset(crossGroup(hosts));
  const int m = hosts.localSize(), me = hosts.localRank;
  const size_t elem = args.kernel.elementSize;
  const size_t chunkElems = std::min(agreed, kChunkBytes) / elem;
  const auto* in = static_cast<const uint8_t*>(args.in);
  auto* buf = static_cast<uint8_t*>(args.buf);
  const size_t sliceElems = sliceElemsFor(args.count, chunkElems, m, elem);
  const size_t step = sliceElems * m;

  auto copyOut = [&](const Chunk& c) {
    for (int j = 0; j < m; ++j) {
      if (j == me) continue;
      Block b = c.slice(j);
      std::memcpy(buf + (c.offset + b.begin) * elem, sharedHalf(space, j, c.phase) + b.begin * elem, b.size * elem);
    }
  };

  Chunk previous;
  bool havePrevious = false;
  for (size_t offset = 0; offset < args.count; offset += step) {
    Chunk c;
    c.offset = offset;
    c.count = std::min(step, args.count - offset);
    c.sliceElems = sliceElems;
    c.phase = space.nextPhase();
    const uint8_t* source = in + c.offset * elem;
    uint8_t* mine = sharedHalf(space, me, c.phase);
    const Block own = c.slice(me);
    std::memcpy(mine, source, own.begin * elem);
    std::memcpy(mine + (own.begin + own.size) * elem, source + (own.begin + own.size) * elem,
                (c.count - own.begin - own.size) * elem);
    space.barrier(comm.deadline());
    if (havePrevious) copyOut(previous);
    reduceOwnSliceOnHost(args, space, c, me, m, source, mine);
    if (own.size > 0) {
      uint8_t* slice = mine + own.begin * elem;
      allreduceSliceAcrossHosts(args, cross, slice, own.size);
      std::memcpy(buf + (c.offset + own.begin) * elem, slice, own.size * elem);
    }
    previous = c;
    havePrevious = true;
  }
  space.barrier(comm.deadline());
  copyOut(previous);
}

// Cross-host group i ring-allgathers its members' blocks straight into `out`; then, inside the
// host, local rank i publishes those blocks (packed, host order) and the others unpack them.
// The host stage runs in rounds of one buffer half (one barrier each, double buffering).
void allgatherHierarchical(Communicator& comm, uint8_t* out, const std::vector<size_t>& bytes,
                           const std::vector<size_t>& offsets) {
  const auto& hosts = comm.hosts();
  HVD_CHECK(hosts.uniform && hosts.count > 1) << "hierarchical allgather on an unsuitable placement";
  const int m = hosts.localSize(), me = hosts.localRank;

  const std::vector<int> group = crossGroup(hosts);
  std::vector<size_t> groupBytes, groupOffsets;
  for (int r : group) {
    groupBytes.push_back(bytes[r]);
    groupOffsets.push_back(offsets[r]);
  }
  allgatherRing(comm.subset(group), out, groupBytes, groupOffsets);

  SharedSpace& space = hostSpace(comm);
  const size_t half = sharedHalfBytes(space);
  // Local rank j's packed contribution: the blocks of members[h][j] for h = 0, 1, ...
  std::vector<size_t> packed(m, 0);
  for (int j = 0; j < m; ++j) {
    for (const auto& members : hosts.members) packed[j] += bytes[members[j]];
  }
  // Calls f(outOffset, packedOffset, len) for the part of contribution j in [start, start + len).
  auto pieces = [&](int j, size_t start, size_t len, auto&& f) {
    size_t at = 0;
    for (const auto& members : hosts.members) {
      const int r = members[j];
      const size_t lo = std::max(at, start), hi = std::min(at + bytes[r], start + len);
      if (lo < hi) f(offsets[r] + (lo - at), lo - start, hi - lo);
      at += bytes[r];
      if (at >= start + len) break;
    }
  };
  const size_t largest = *std::max_element(packed.begin(), packed.end());
  for (size_t start = 0; start < largest; start += half) {
    const uint64_t phase = space.nextPhase();
    if (packed[me] > start) {
      uint8_t* mine = sharedHalf(space, me, phase);
      pieces(me, start, std::min(half, packed[me] - start),
             [&](size_t o, size_t p, size_t len) { std::memcpy(mine + p, out + o, len); });
    }
    space.barrier(comm.deadline());
    for (int j = 0; j < m; ++j) {
      if (j == me || packed[j] <= start) continue;
      const uint8_t* theirs = sharedHalf(space, j, phase);
      pieces(j, start, std::min(half, packed[j] - start),
             [&](size_t o, size_t p, size_t len) { std::memcpy(out + o, theirs + p, len); });
    }
  }
}

// Leaders: the root on its host, the lowest member on every other host. The leaders broadcast
// over point-to-point (tree or chain, by size), then each leader passes the data to its host
// through shared memory. Hosts with one member skip the second stage.
void broadcastHierarchical(Communicator& comm, uint8_t* buf, size_t bytes, int root) {
  const auto& hosts = comm.hosts();
  const int rootHost = hosts.hostOfRank[root];
  auto leaderOf = [&](int h) { return h == rootHost ? root : hosts.members[h][0]; };
  const int myLeader = leaderOf(hosts.host);
  if (comm.rank() == myLeader) {
    std::vector<int> leaders;
    for (int h = 0; h < hosts.count; ++h) leaders.push_back(leaderOf(h));
    std::sort(leaders.begin(), leaders.end());
    const int leaderRoot = static_cast<int>(std::find(leaders.begin(), leaders.end(), root) - leaders.begin());
    broadcast(comm.subset(leaders), buf, bytes, leaderRoot);
  }
  if (hosts.localSize() > 1) {
    const auto& mine = hosts.members[hosts.host];
    const int leaderIndex = static_cast<int>(std::find(mine.begin(), mine.end(), myLeader) - mine.begin());
    broadcastShared(comm, hostSpace(comm), buf, bytes, leaderIndex);
  }
}

}  // namespace hvd::collectives
