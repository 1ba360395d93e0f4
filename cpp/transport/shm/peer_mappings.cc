#include "transport/shm/peer_mappings.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "transport/shm/segment.h"

namespace hvd::shm {

uint8_t* PeerMappings::map(const SharedBufferInfo& info, std::shared_ptr<void>& hold) {
  if (info.owner == static_cast<int64_t>(::getpid())) {
    hold.reset();
    return info.base;
  }
  const auto key = std::make_pair(info.owner, info.id);
  auto it = map_.find(key);
  if (it == map_.end()) {
    auto segment = std::make_shared<Segment>(Segment::open(
        "fd:" + std::to_string(info.owner) + ":" + std::to_string(info.handle), static_cast<size_t>(info.bytes)));
    if (map_.size() >= kMaxMappings) evictOldest();
    it = map_.emplace(key, Mapping{std::move(segment), 0}).first;
  }
  it->second.lastUse = ++clock_;
  hold = it->second.segment;  // alive for the caller's operation even if evicted meanwhile
  return it->second.segment->data();
}

void PeerMappings::evictOldest() {
  auto oldest = std::min_element(map_.begin(), map_.end(),
                                 [](const auto& a, const auto& b) { return a.second.lastUse < b.second.lastUse; });
  map_.erase(oldest);
}

}  // namespace hvd::shm
