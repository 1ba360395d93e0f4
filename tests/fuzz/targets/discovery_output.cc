// What a host-discovery script prints (launcher/hosts.h parseDiscoveredHosts, run by the elastic
// driver every interval): valid hosts or a UsageError naming the bad line.
#include <string>

#include "fuzz_target.h"
#include "horovod/errors.h"
#include "hosts.h"
#include "options.h"

using namespace hvd;
using namespace hvd::launcher;

HVD_FUZZ_TARGET(discovery_output) {
  try {
    auto hosts = parseDiscoveredHosts(std::string(fuzz::text(data, size)), 2);
    for (const auto& h : hosts) HVD_FUZZ_CHECK(!h.host.empty() && h.slots >= 0);
    HVD_FUZZ_CHECK(totalSlots(hosts) >= 0);
  } catch (const UsageError&) {
  }
  return 0;
}
