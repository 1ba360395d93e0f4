// horovodrun -H (launcher/hosts.h): "h1:2,h2:4" parses into hosts with valid names and counts,
// or fails with UsageError; slot totals never overflow, and assigning ranks works for any
// number of processes up to the total.
#include <string>

#include "fuzz_target.h"
#include "horovod/errors.h"
#include "hosts.h"
#include "options.h"

using namespace hvd;
using namespace hvd::launcher;

HVD_FUZZ_TARGET(hosts_arg) {
  std::vector<HostSlots> hosts;
  try {
    hosts = parseHosts(std::string(fuzz::text(data, size)));
  } catch (const UsageError&) {
    return 0;
  }
  HVD_FUZZ_CHECK(!hosts.empty());
  int total = totalSlots(hosts);
  HVD_FUZZ_CHECK(total >= 0);
  for (const auto& h : hosts) HVD_FUZZ_CHECK(!h.host.empty() && h.slots >= 0);
  // Placements for a job that fits (bounded so a large count stays fast).
  int np = std::min(total, 64);
  auto slots = assignSlots(hosts, np);
  HVD_FUZZ_CHECK(static_cast<int>(slots.size()) == np);
  return 0;
}
