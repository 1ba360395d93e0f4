#include "elastic/slots.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace hvd::elastic {

int totalSlots(const std::vector<HostSlots>& hosts) {
  // Saturates: many hosts of up to a billion slots each can exceed an int.
  int64_t total = 0;
  for (const auto& h : hosts) total = std::min<int64_t>(total + h.slots, std::numeric_limits<int>::max());
  return static_cast<int>(total);
}

std::vector<SlotInfo> fillSlots(const std::vector<HostSlots>& hosts, int np) {
  std::vector<std::string> hostOf;
  for (const auto& h : hosts) {
    for (int i = 0; i < h.slots && static_cast<int>(hostOf.size()) < np; ++i) hostOf.push_back(h.host);
  }
  return slotsOnHosts(hostOf);
}

std::vector<SlotInfo> slotsOnHosts(const std::vector<std::string>& hostOf) {
  const std::vector<Placement> placements = placementsOnHosts(hostOf);
  std::vector<SlotInfo> slots(placements.size());
  for (size_t r = 0; r < slots.size(); ++r) {
    static_cast<Placement&>(slots[r]) = placements[r];
    slots[r].hostname = hostOf[r];
  }
  return slots;
}

}  // namespace hvd::elastic
