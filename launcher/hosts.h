// Hosts and slots: parsing -H and hostfiles, and assigning ranks to slots.
//
// The assignment is a pure function of (hosts in order, number of processes) so that an
// elastic driver can recompute it when hosts come and go and diff the result against the
// running workers.
#pragma once

#include <string>
#include <vector>

#include "elastic/slots.h"

namespace hvd::launcher {

// A host as the user wrote it (-H, hostfile, discovery) with its slots; one process's place.
using elastic::HostSlots;
using elastic::SlotInfo;
using elastic::totalSlots;

// "h1:2,h2:4". Each item must match [A-Za-z0-9_.-]+:[0-9]+, else UsageError with Horovod's
// message. A host listed twice gets the sum of its slots, at its first position.
std::vector<HostSlots> parseHosts(const std::string& text);

// A hostfile: one "<hostname> slots=<n>" per line; a bare hostname means one slot; blank lines
// and '#' comments are skipped. Errors name the file and line.
std::vector<HostSlots> parseHostfile(const std::string& path);
// The same for a hostfile's contents; `path` names it in errors.
std::vector<HostSlots> parseHostfileText(const std::string& text, const std::string& path);

// Discovery-script output: one "host" or "host:slots" per line; bare names get
// `defaultSlots`; duplicates collapse (the last count wins).
std::vector<HostSlots> parseDiscoveredHosts(const std::string& output, int defaultSlots);

// Assigns ranks 0..np-1 to slots: hosts in order, each host's slots filled consecutively; the
// placements follow hvd::placementsOnHosts (common/placement.h).
// Throws UsageError "Requested more processes (np) than there are available slots (n)".
std::vector<SlotInfo> assignSlots(const std::vector<HostSlots>& hosts, int np);

}  // namespace hvd::launcher
