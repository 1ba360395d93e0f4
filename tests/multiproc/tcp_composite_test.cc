// The "shm+tcp" composite with its real backends: ranks are threads of this process and
// hostOf is faked, so shared memory serves each fake host and TCP connects the hosts.
#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "store/memory_store.h"
#include "transport/composite.h"
#include "transport/transport.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(20s); }

std::vector<uint8_t> pattern(int from, int to, size_t bytes, int salt) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 7 + from * 31 + to * 57 + salt * 11 + (i >> 10));
  return v;
}

void runRanks(const std::string& name, const std::vector<std::string>& hostOf,
              const std::function<void(int, Transport&)>& body) {
  static int job = 0;
  int size = static_cast<int>(hostOf.size());
  auto store = std::make_shared<MemoryStore>();
  std::string jobId = "composite-real-" + std::to_string(::getpid()) + "-" + std::to_string(++job);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        TransportContext c;
        c.rank = r;
        c.size = size;
        c.hostOf = hostOf;
        c.store = store;
        c.jobId = jobId;
        c.secret = "s";
        c.timeout = 20000ms;
        auto t = makeTransport(name, c);
        body(r, *t);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(CompositeShmTcp, BackendsAreRegistered) {
  EXPECT_TRUE(hasTransport("shm"));
  EXPECT_TRUE(hasTransport("tcp"));
  EXPECT_TRUE(hasTransport("shm+tcp"));
}

TEST(CompositeShmTcp, AutoPicksTheCompositeAndExchangesAllPairs) {
  for (const auto& hosts :
       {std::vector<std::string>{"a", "a", "b", "b"}, std::vector<std::string>{"a", "b", "a", "b", "a"}}) {
    runRanks("auto", hosts, [&](int rank, Transport& t) {
      ASSERT_EQ(t.name(), "shm+tcp");
      EXPECT_TRUE(dynamic_cast<CompositeTransport&>(t).hasLocal());
      int n = t.size();
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{70000}, size_t{4} << 20}) {
        for (int s = 0; s < n; ++s) {
          int to = (rank + s) % n, from = (rank - s + n) % n;
          auto out = pattern(rank, to, bytes, s);
          std::vector<uint8_t> in(bytes);
          t.sendRecv(to, out.data(), out.size(), from, in.data(), in.size(), soon());
          ASSERT_TRUE(in == pattern(from, rank, bytes, s)) << "rank " << rank << " step " << s << " bytes " << bytes;
        }
      }
    });
  }
}

TEST(CompositeShmTcp, MailboxAndSharedSpace) {
  std::vector<std::string> hosts = {"a", "a", "b", "b"};
  runRanks("shm+tcp", hosts, [&](int rank, Transport& t) {
    for (int peer = 0; peer < 4; ++peer) t.post(peer, &rank, sizeof(rank));
    int got = 0;
    Deadline d = soon();
    while (got < 4) {
      auto m = t.poll();
      if (!m) {
        ASSERT_TRUE(t.waitForMessage(d) || !d.expired());
        ASSERT_FALSE(d.expired());
        continue;
      }
      int value;
      std::memcpy(&value, m->bytes.data(), sizeof(value));
      EXPECT_EQ(value, m->from);
      got++;
    }
    std::vector<int> mine = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    SharedSpace* space = t.sharedSpace(mine, soon());
    ASSERT_NE(space, nullptr);
    EXPECT_EQ(space->members(), mine);
    static_cast<int*>(space->buffer(space->memberIndex()))[0] = 100 + rank;
    space->barrier(soon());
    EXPECT_EQ(static_cast<int*>(space->buffer(1 - space->memberIndex()))[0], 100 + mine[1 - space->memberIndex()]);
    space->barrier(soon());
    EXPECT_EQ(t.sharedSpace({0, 2}, soon()), nullptr);
  });
}

}  // namespace
}  // namespace hvd
