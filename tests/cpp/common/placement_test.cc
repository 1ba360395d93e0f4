#include "common/placement.h"

#include <gtest/gtest.h>

namespace hvd {
namespace {

TEST(Placement, FromHostsOfRanks) {
  // Hosts a (ranks 0, 1, 4) and b (ranks 2, 3): hosts count in order of their lowest rank, and a
  // rank's local rank is its index among its host's ranks even when the ranks interleave.
  const auto p = placementsOnHosts({"a", "a", "b", "b", "a"});
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0], (Placement{.rank = 0, .size = 5, .localRank = 0, .localSize = 3, .crossRank = 0, .crossSize = 2}));
  EXPECT_EQ(p[2], (Placement{.rank = 2, .size = 5, .localRank = 0, .localSize = 2, .crossRank = 1, .crossSize = 2}));
  EXPECT_EQ(p[3], (Placement{.rank = 3, .size = 5, .localRank = 1, .localSize = 2, .crossRank = 1, .crossSize = 2}));
  // Local rank 2 exists on host a only.
  EXPECT_EQ(p[4], (Placement{.rank = 4, .size = 5, .localRank = 2, .localSize = 3, .crossRank = 0, .crossSize = 1}));
}

TEST(Placement, OneHostAndNone) {
  const auto one = placementsOnHosts({"h", "h"});
  EXPECT_EQ(one[1], (Placement{.rank = 1, .size = 2, .localRank = 1, .localSize = 2, .crossRank = 0, .crossSize = 1}));
  EXPECT_TRUE(placementsOnHosts({}).empty());
}

}  // namespace
}  // namespace hvd
