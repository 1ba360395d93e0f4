// Runs N ranks as threads of this process (support/rank_threads.h), each building a transport
// over one MemoryStore.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/memory_store.h"
#include "support/rank_threads.h"
#include "transport/transport.h"

namespace hvd::test {

inline std::vector<TransportContext> makeContexts(int size, std::vector<std::string> hostOf = {},
                                                  const std::string& secret = "test-secret") {
  static int job = 0;
  auto store = std::make_shared<MemoryStore>();
  if (hostOf.empty()) hostOf.assign(size, "localhost");
  std::vector<TransportContext> contexts(size);
  std::string jobId = "job" + std::to_string(++job);
  for (int r = 0; r < size; ++r) {
    contexts[r].rank = r;
    contexts[r].size = size;
    contexts[r].hostOf = hostOf;
    contexts[r].store = store;
    contexts[r].jobId = jobId;
    contexts[r].secret = secret;
    contexts[r].timeout = std::chrono::milliseconds(20000);
  }
  return contexts;
}

// Builds `transportName` on every rank (collectively), then runs body(rank, transport) on each
// rank's thread. Rethrows the first failure after all threads finished.
inline void runRanks(const std::string& transportName, const std::vector<TransportContext>& contexts,
                     const std::function<void(int, Transport&)>& body) {
  runRankThreads(
      static_cast<int>(contexts.size()),
      [&](int r) {
        auto transport = makeTransport(transportName, contexts[r]);
        body(r, *transport);
      },
      std::chrono::seconds(240));  // only a hang takes this long
}

inline void runRanks(const std::string& transportName, int size, const std::function<void(int, Transport&)>& body) {
  runRanks(transportName, makeContexts(size), body);
}

// Deterministic test pattern for (sender, receiver, size).
inline std::vector<uint8_t> pattern(int from, int to, size_t bytes, int salt = 0) {
  std::vector<uint8_t> v(bytes);
  uint32_t x = 0x9e3779b9u * (from + 1) + 0x85ebca6bu * (to + 1) + 0xc2b2ae35u * (salt + 1);
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

}  // namespace hvd::test
