// A hostfile (launcher/hosts.h: "<host> slots=<n>" lines): parses into valid hosts or fails with
// UsageError naming the file and line.
#include <string>

#include "fuzz_target.h"
#include "horovod/errors.h"
#include "hosts.h"
#include "options.h"

using namespace hvd;
using namespace hvd::launcher;

HVD_FUZZ_TARGET(hostfile) {
  try {
    auto hosts = parseHostfileText(std::string(fuzz::text(data, size)), "hostfile");
    HVD_FUZZ_CHECK(!hosts.empty());
    HVD_FUZZ_CHECK(totalSlots(hosts) >= 0);
  } catch (const UsageError& e) {
    HVD_FUZZ_CHECK(std::string(e.what()).find("hostfile") != std::string::npos);
  }
  return 0;
}
