// Limits on what horovodrun reads from its user and from discovery scripts: slot counts that
// would overflow and config files nested beyond the schema fail with errors naming the input.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "config_file.h"
#include "hosts.h"
#include "options.h"

namespace hvd::launcher {
namespace {

template <typename F>
std::string usageErrorOf(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(InputLimits, SlotsOfARepeatedHostCannotOverflow) {
  std::string why = usageErrorOf([] { parseHosts("a:999999999,a:1"); });
  EXPECT_NE(why.find("host a is listed with more than 999999999 slots"), std::string::npos) << why;
  why = usageErrorOf([] { parseHostfileText("a slots=999999999\na slots=1\n", "hosts.txt"); });
  EXPECT_NE(why.find("hosts.txt:2:"), std::string::npos) << why;
}

TEST(InputLimits, TotalSlotsSaturate) {
  auto hosts = parseDiscoveredHosts("a:999999999\nb:999999999\nc:999999999\n", 1);
  EXPECT_EQ(totalSlots(hosts), std::numeric_limits<int>::max());
}

TEST(InputLimits, ConfigNestingIsBounded) {
  std::string text;
  for (int depth = 0; depth < 40; ++depth) text += std::string(depth * 2, ' ') + "k" + std::to_string(depth) + ":\n";
  text += std::string(80, ' ') + "leaf: 1\n";
  Options options;
  std::string why = usageErrorOf([&] { applyConfigText(text, "deep.yaml", options); });
  EXPECT_NE(why.find("deep.yaml:"), std::string::npos) << why;
  EXPECT_NE(why.find("nested deeper than 32 levels"), std::string::npos) << why;
}

}  // namespace
}  // namespace hvd::launcher
