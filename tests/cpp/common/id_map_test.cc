// IdMap and FlatIdMap against std::unordered_map under random inserts and erases (backward-shift
// deletion and wrap-around probing are where an open-addressing map goes wrong), plus IdMap's
// pointer stability.
#include "common/id_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace hvd {
namespace {

template <typename Map>
void matchesUnorderedMapUnderRandomOperations() {
  std::mt19937 rng(7);
  // range 0: ids that share their low bits (homes collide in any table size up to 4096), so runs
  // mix ids displaced by different amounts.
  for (uint32_t range : {8u, 64u, 1000u, 100000u, 0u}) {
    Map map;
    std::unordered_map<uint32_t, int> ref;
    // Ids from a sliding window, like cache ids: new ones grow, old ones get erased.
    uint32_t base = 0;
    for (int step = 0; step < 20000; ++step) {
      uint32_t id = range > 0 ? base + rng() % range : (rng() % 256) * 4096 + rng() % 3;
      switch (rng() % 4) {
        case 0:
        case 1:
          map.assign(id, step);
          ref[id] = step;
          break;
        case 2: EXPECT_EQ(map.erase(id), ref.erase(id) == 1); break;
        default: base += 1;
      }
      if (step % 97 == 0) {
        ASSERT_EQ(map.size(), ref.size());
        for (auto& [k, v] : ref) {
          const int* got = map.find(k);
          ASSERT_NE(got, nullptr) << "id " << k;
          ASSERT_EQ(*got, v);
        }
        size_t seen = 0;
        map.forEach([&](uint32_t k, int v) {
          ++seen;
          ASSERT_EQ(ref.at(k), v);
        });
        ASSERT_EQ(seen, ref.size());
        for (int k = 0; k < 50; ++k) {  // absent ids: found nowhere, erased nowhere
          uint32_t absent = range > 0 ? base + rng() % (2 * range) : (rng() % 512) * 4096 + rng() % 5;
          if (ref.count(absent) == 0) {
            ASSERT_EQ(map.find(absent), nullptr) << "id " << absent;
            ASSERT_FALSE(map.erase(absent)) << "id " << absent;
          }
        }
      }
    }
  }
}

TEST(IdMap, MatchesUnorderedMapUnderRandomOperations) { matchesUnorderedMapUnderRandomOperations<IdMap<int>>(); }
TEST(FlatIdMap, MatchesUnorderedMapUnderRandomOperations) {
  matchesUnorderedMapUnderRandomOperations<FlatIdMap<int>>();
}

TEST(IdMap, ValuesNeverMove) {
  IdMap<std::string> map;
  std::string* first = &map[5];
  *first = "five";
  for (uint32_t id = 100; id < 5000; ++id) map[id] = "x";  // many rehashes
  for (uint32_t id = 100; id < 5000; id += 2) map.erase(id);  // many backward shifts
  EXPECT_EQ(map.find(5), first);
  EXPECT_EQ(*first, "five");
}

template <typename Map>
void eraseIfAndClear() {
  Map map;
  for (uint32_t id = 0; id < 100; ++id) map.assign(id, static_cast<int>(id));
  map.eraseIf([](uint32_t id, int) { return id % 3 == 0; });
  EXPECT_EQ(map.size(), 66u);
  EXPECT_EQ(map.find(3), nullptr);
  EXPECT_NE(map.find(4), nullptr);
  map.clear();
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.find(4), nullptr);
  map[4] = 1;
  EXPECT_EQ(*map.find(4), 1);
}

TEST(IdMap, EraseIfAndClear) { eraseIfAndClear<IdMap<int>>(); }
TEST(FlatIdMap, EraseIfAndClear) { eraseIfAndClear<FlatIdMap<int>>(); }

}  // namespace
}  // namespace hvd
