// Helpers for the shm transport tests: N ranks as threads of this process, each with its own
// ShmTransport over one SharedTestStore.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shared_test_store.h"
#include "support/rank_threads.h"
#include "transport/shm/shm_transport.h"

namespace hvd::shm::testing {

inline std::string uniqueJobId() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "test";
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return "t" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" + name;
}

inline ShmOptions smallOptions() {
  ShmOptions options;
  options.ringBytes = 64 << 10;
  options.mailboxBytes = 16 << 10;
  options.spaceBytes = 1 << 20;
  options.spin = std::chrono::microseconds(20);
  return options;
}

inline TransportContext makeContext(int rank, int size, std::shared_ptr<Store> store, const std::string& jobId) {
  TransportContext context;
  context.rank = rank;
  context.size = size;
  context.store = std::move(store);
  context.jobId = jobId;
  context.timeout = std::chrono::milliseconds(20000);
  return context;
}

// Runs body(rank, transport) on `size` threads, one ShmTransport each. All ranks pass a
// barrier before their transports are destroyed, so an early finisher does not look "lost".
// Exceptions escaping a body fail the test with the rank and message.
inline void runRanks(int size, const std::function<void(int, ShmTransport&)>& body,
                     ShmOptions options = smallOptions()) {
  auto store = std::make_shared<SharedTestStore>();
  std::string jobId = uniqueJobId();
  std::barrier done(size);
  test::runRankThreads(
      size,
      [&](int r) {
        std::unique_ptr<ShmTransport> transport;
        try {
          transport = std::make_unique<ShmTransport>(makeContext(r, size, store, jobId), options);
          body(r, *transport);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << " threw: " << e.what();
        }
        done.arrive_and_wait();
      },
      std::chrono::seconds(240));  // only a hang takes this long
}

// Names in /dev/shm that contain `needle`.
inline std::vector<std::string> devShmEntries(const std::string& needle) {
  std::vector<std::string> found;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name.find(needle) != std::string::npos) found.push_back(name);
    }
    ::closedir(dir);
  }
  return found;
}

// Deterministic test bytes: differ by stream and position.
inline uint8_t pattern(int from, int to, size_t i) {
  return static_cast<uint8_t>((i * 131u) ^
                              (static_cast<unsigned>(from) * 17u + static_cast<unsigned>(to) * 7u + (i >> 12)));
}
inline std::vector<uint8_t> patternBytes(int from, int to, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(from, to, i);
  return v;
}

}  // namespace hvd::shm::testing
