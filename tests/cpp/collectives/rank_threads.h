// Test harness: runs N ranks as threads (support/rank_threads.h), each with its own LocalTransport
// over one fresh job id and a Communicator over all ranks. Exceptions from any rank are rethrown
// on the test thread (the first one by rank); every blocking call has the communicator's
// deadline, so a hang fails.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "support/rank_threads.h"
#include "transport/local/local_transport.h"

namespace hvd::test {

struct RankOptions {
  bool shared = true;
  size_t sharedCapacity = size_t(1) << 20;
  std::string algorithm;  // allreduce algorithm override ("" = by size)
  std::chrono::milliseconds timeout{20000};
};

// Longer than any grid of ranks takes here; only a hang reaches it.
constexpr std::chrono::seconds kRankThreadsLimit{240};

inline std::string freshJobId() {
  static std::atomic<int> counter{0};
  return "coll-test-" + std::to_string(counter++);
}

inline void runRanks(int n, const RankOptions& options, const std::function<void(Communicator&)>& body) {
  std::string job = freshJobId();
  runRankThreads(
      n,
      [&](int r) {
        LocalTransportOptions transportOptions;
        transportOptions.sharedMemory = options.shared;
        transportOptions.sharedCapacity = options.sharedCapacity;
        LocalTransport transport(job, r, n, transportOptions);
        std::vector<int> members(n);
        std::iota(members.begin(), members.end(), 0);
        Communicator comm(transport, members, options.timeout);
        comm.setAllreduceAlgorithm(options.algorithm);
        body(comm);
      },
      kRankThreadsLimit);
}

}  // namespace hvd::test
