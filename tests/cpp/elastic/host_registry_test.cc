// The elastic driver's host registry: discovery order, blacklisting for good or with a cooldown
// that doubles with each blacklisting of the same host (clamped to the range), and hosts coming
// back once their cooldown is over.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "elastic/host_registry.h"

namespace hvd::elastic {
namespace {

using namespace std::chrono_literals;
using Clock = HostRegistry::Clock;

std::vector<std::string> names(const std::vector<HostSlots>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.host);
  return out;
}

TEST(HostRegistry, AvailableHostsKeepTheOrderOfFirstAppearance) {
  HostRegistry registry(std::nullopt);
  registry.setDiscovered({{"b", 2}, {"a", 2}});
  registry.setDiscovered({{"c", 1}, {"a", 2}, {"b", 2}});
  const auto now = Clock::now();
  EXPECT_EQ(names(registry.available(now)), (std::vector<std::string>{"b", "a", "c"}));
  registry.setDiscovered({{"a", 2}, {"c", 0}});  // b gone, c without slots
  EXPECT_EQ(names(registry.available(now)), (std::vector<std::string>{"a"}));
}

TEST(HostRegistry, WithoutACooldownRangeABlacklistingIsForGood) {
  HostRegistry registry(std::nullopt);
  registry.setDiscovered({{"a", 2}, {"b", 2}});
  const auto now = Clock::now();
  EXPECT_FALSE(registry.blacklist("a", now).has_value());
  EXPECT_TRUE(registry.isBlacklisted("a", now + 24h));
  EXPECT_FALSE(registry.allBlacklistedForGood());
  registry.blacklist("b", now);
  EXPECT_TRUE(registry.allBlacklistedForGood());
  EXPECT_TRUE(registry.empty(now + 24h));
}

TEST(HostRegistry, CooldownDoublesWithEachBlacklistingWithinTheRange) {
  // Range [2 s, 20 s]: the n-th cooldown is 2 * 2^n + U(0,1) * 2 seconds, clamped to the range.
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    HostRegistry registry(std::make_pair(2, 20), seed);
    registry.setDiscovered({{"a", 2}});
    auto now = Clock::now();
    std::vector<double> lengths;
    for (int n = 0; n < 5; ++n) {
      auto length = registry.blacklist("a", now);
      ASSERT_TRUE(length.has_value());
      lengths.push_back(std::chrono::duration<double>(*length).count());
      EXPECT_TRUE(registry.isBlacklisted("a", now + *length - 1ms)) << n;
      EXPECT_FALSE(registry.isBlacklisted("a", now + *length)) << n;
      EXPECT_FALSE(registry.allBlacklistedForGood());
      now += *length;
    }
    EXPECT_GE(lengths[0], 2.0);
    EXPECT_LE(lengths[0], 4.0);
    EXPECT_GE(lengths[1], 4.0);
    EXPECT_LE(lengths[1], 6.0);
    EXPECT_GE(lengths[2], 8.0);
    EXPECT_LE(lengths[2], 10.0);
    EXPECT_GE(lengths[3], 16.0);
    EXPECT_LE(lengths[3], 18.0);
    EXPECT_DOUBLE_EQ(lengths[4], 20.0);  // 32 s and more: clamped
  }
}

TEST(HostRegistry, AHostComesBackAfterItsCooldownIfDiscoveryStillReportsIt) {
  HostRegistry registry(std::make_pair(1, 1), 7);
  registry.setDiscovered({{"a", 2}, {"b", 2}});
  const auto now = Clock::now();
  auto length = registry.blacklist("b", now);
  ASSERT_TRUE(length.has_value());
  EXPECT_EQ(*length, 1000ms);
  EXPECT_EQ(names(registry.available(now)), (std::vector<std::string>{"a"}));
  EXPECT_EQ(names(registry.available(now + 1s)), (std::vector<std::string>{"a", "b"}));
  registry.setDiscovered({{"a", 2}});
  EXPECT_EQ(names(registry.available(now + 1s)), (std::vector<std::string>{"a"}));
}

}  // namespace
}  // namespace hvd::elastic
