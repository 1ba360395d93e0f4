// Limits on what horovodrun reads from its user and from discovery scripts: slot counts that
// would overflow, numbers out of their range and config files nested beyond the schema fail with
// errors naming the input.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "cli.h"
#include "config_file.h"
#include "gloo_launch.h"
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

TEST(InputLimits, NumbersOutOfRangeAreRefusedNotWrapped) {
  std::string why = usageErrorOf([] { parseCommandLine({"-np", "4294967297", "python3", "x.py"}); });
  EXPECT_NE(why.find("invalid int value: '4294967297'"), std::string::npos) << why;
  why = usageErrorOf([] { validateOptions(parseCommandLine({"-np", "2", "-p", "99999", "python3", "x.py"})); });
  EXPECT_NE(why.find("ssh_port=99999"), std::string::npos) << why;
  why = usageErrorOf([] {
    validateOptions(parseCommandLine(
        {"-np", "2", "--min-np", "1", "--reset-limit", "-1", "--host-discovery-script", "d.sh", "python3", "x.py"}));
  });
  EXPECT_NE(why.find("reset_limit=-1 must be >= 0"), std::string::npos) << why;
}

TEST(InputLimits, StartTimeoutMustBeAFiniteNumberOfSeconds) {
  for (const char* bad : {"inf", "nan", "1e10", "-1"}) {
    Options o;
    o.startTimeout = std::stod(bad);
    std::string why = usageErrorOf([&] { startTimeoutSeconds(o); });
    EXPECT_NE(why.find("--start-timeout="), std::string::npos) << bad << ": " << why;
  }
  Options o;
  o.startTimeout = 30;
  EXPECT_EQ(startTimeoutSeconds(o), 30);
}

}  // namespace
}  // namespace hvd::launcher
