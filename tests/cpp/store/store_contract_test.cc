// The Store contract, checked against every implementation: memory, file, tcp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "store/file_store.h"
#include "store/memory_store.h"
#include "store/store.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;

// Owns whatever a store needs (a server, a directory) and makes clients: each client() is a
// separate handle, as separate ranks would have.
class StoreFixture {
 public:
  virtual ~StoreFixture() = default;
  virtual std::shared_ptr<Store> client() = 0;
};

class MemoryFixture : public StoreFixture {
 public:
  std::shared_ptr<Store> client() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = std::make_shared<MemoryStore>();
};

class FileFixture : public StoreFixture {
 public:
  FileFixture() {
    char tmpl[] = "/tmp/hvd-filestore-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~FileFixture() override { std::filesystem::remove_all(dir_); }
  std::shared_ptr<Store> client() override { return std::make_shared<FileStore>(dir_ + "/sub/dir"); }

 private:
  std::string dir_;
};

class TcpFixture : public StoreFixture {
 public:
  std::shared_ptr<Store> client() override {
    return std::make_shared<TcpStore>("127.0.0.1", server_.port(), "secret", Deadline::after(5s));
  }

 private:
  TcpStoreServer server_{"127.0.0.1", 0, "secret"};
};

using FixtureMaker = std::function<std::unique_ptr<StoreFixture>()>;

class StoreContract : public ::testing::TestWithParam<std::pair<std::string, FixtureMaker>> {
 protected:
  void SetUp() override { fixture_ = GetParam().second(); }
  std::unique_ptr<StoreFixture> fixture_;
};

Bytes bytesOf(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST_P(StoreContract, SetGetOverwrite) {
  auto a = fixture_->client();
  auto b = fixture_->client();
  a->set("key", bytesOf("one"), Deadline::after(5s));
  EXPECT_EQ(b->get("key", Deadline::after(5s)), bytesOf("one"));
  b->set("key", bytesOf("two"), Deadline::after(5s));
  EXPECT_EQ(getString(*a, "key", Deadline::after(5s)), "two");
  setString(*a, "empty", "", Deadline::after(5s));
  EXPECT_EQ(getString(*b, "empty", Deadline::after(5s)), "");
  // Keys with separators and odd bytes, and a large binary value.
  std::string odd = "a/b/../c d%\x01\xff";
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + 7);
  a->set(odd, big, Deadline::after(5s));
  EXPECT_EQ(b->get(odd, Deadline::after(5s)), big);
  std::string longKey(600, 'k');
  setString(*a, longKey, "long", Deadline::after(5s));
  EXPECT_EQ(getString(*b, longKey, Deadline::after(5s)), "long");
}

TEST_P(StoreContract, GetBlocksUntilSet) {
  auto a = fixture_->client();
  auto b = fixture_->client();
  std::atomic<bool> setDone{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(150ms);
    setDone = true;
    setString(*b, "late", "value", Deadline::after(5s));
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(getString(*a, "late", Deadline::after(10s)), "value");
  EXPECT_TRUE(setDone.load());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  setter.join();
}

TEST_P(StoreContract, GetAndWaitTimeOutNamingKeys) {
  auto a = fixture_->client();
  auto start = std::chrono::steady_clock::now();
  try {
    a->get("never-set", Deadline::after(200ms));
    FAIL() << "expected Timeout";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("never-set"), std::string::npos) << e.what();
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 3s);
  setString(*a, "present", "x", Deadline::after(5s));
  try {
    a->wait({"present", "absent-1", "absent-2"}, Deadline::after(200ms));
    FAIL() << "expected Timeout";
  } catch (const Timeout& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("absent-1"), std::string::npos) << what;
    EXPECT_NE(what.find("absent-2"), std::string::npos) << what;
    EXPECT_EQ(what.find("'present'"), std::string::npos) << what;
  }
  // The store stays usable after a timeout.
  EXPECT_EQ(getString(*a, "present", Deadline::after(5s)), "x");
}

TEST_P(StoreContract, WaitForManyKeys) {
  auto a = fixture_->client();
  auto b = fixture_->client();
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back("w/" + std::to_string(i));
  std::thread setter([&] {
    for (const auto& k : keys) setString(*b, k, k, Deadline::after(5s));
  });
  a->wait(keys, Deadline::after(10s));
  for (const auto& k : keys) EXPECT_EQ(getString(*a, k, Deadline::after(1s)), k);
  setter.join();
  a->wait({}, Deadline::after(1s));
}

TEST_P(StoreContract, AddIsAtomicAcrossThreads) {
  constexpr int kThreads = 6;
  constexpr int kAdds = 40;
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(fixture_->client());
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(clients[t]->add("counter", 1, Deadline::after(10s)));
    });
  }
  for (auto& th : threads) th.join();
  // Every intermediate value was returned exactly once.
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < kThreads * kAdds; ++i) ASSERT_EQ(all[i], i + 1);
  auto a = fixture_->client();
  EXPECT_EQ(a->add("counter", -5, Deadline::after(5s)), kThreads * kAdds - 5);
  EXPECT_EQ(getString(*a, "counter", Deadline::after(5s)), std::to_string(kThreads * kAdds - 5));
  EXPECT_EQ(a->add("fresh", 0, Deadline::after(5s)), 0);
  setString(*a, "text", "abc", Deadline::after(5s));
  EXPECT_THROW(a->add("text", 1, Deadline::after(5s)), StoreError);
}

TEST_P(StoreContract, AddThatOverflowsFailsAndKeepsTheValue) {
  auto a = fixture_->client();
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(a->add("big", max, Deadline::after(5s)), max);
  try {
    a->add("big", 1, Deadline::after(5s));
    FAIL() << "an add past INT64_MAX succeeded";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("'big'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
  }
  EXPECT_EQ(getString(*a, "big", Deadline::after(5s)), std::to_string(max));
  EXPECT_EQ(a->add("big", -1, Deadline::after(5s)), max - 1);
}

TEST_P(StoreContract, ManyThreadsRendezvous) {
  // Each "rank" publishes its key and waits for all others', like a transport's address exchange.
  constexpr int kRanks = 8;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto s = fixture_->client();
      PrefixStore p("job1", s);
      setString(p, "addr/" + std::to_string(r), "rank" + std::to_string(r), Deadline::after(10s));
      bool good = true;
      for (int q = 0; q < kRanks; ++q) {
        good = good && getString(p, "addr/" + std::to_string(q), Deadline::after(10s)) == "rank" + std::to_string(q);
      }
      if (good) ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kRanks);
  auto s = fixture_->client();
  EXPECT_EQ(getString(*s, "job1/addr/3", Deadline::after(1s)), "rank3");
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreContract,
    ::testing::Values(std::make_pair(std::string("memory"),
                                     FixtureMaker([] { return std::make_unique<MemoryFixture>(); })),
                      std::make_pair(std::string("file"), FixtureMaker([] { return std::make_unique<FileFixture>(); })),
                      std::make_pair(std::string("tcp"), FixtureMaker([] { return std::make_unique<TcpFixture>(); }))),
    [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace hvd
