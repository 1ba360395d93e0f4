#include "elastic/host_registry.h"

#include <algorithm>
#include <cmath>

namespace hvd::elastic {

HostRegistry::HostRegistry(std::optional<std::pair<double, double>> cooldownRange, uint64_t seed)
    : cooldown_(cooldownRange), random_(seed) {}

void HostRegistry::setDiscovered(const std::vector<HostSlots>& hosts) {
  for (auto& [name, entry] : hosts_) entry.discovered = false;
  for (const auto& h : hosts) {
    auto [it, inserted] = hosts_.try_emplace(h.host);
    if (inserted) order_.push_back(h.host);
    it->second.discovered = true;
    it->second.slots = h.slots;
  }
}

std::optional<std::chrono::milliseconds> HostRegistry::blacklist(const std::string& host, Clock::time_point now) {
  auto [it, inserted] = hosts_.try_emplace(host);
  if (inserted) order_.push_back(host);
  Entry& e = it->second;
  e.blacklisted = true;
  std::optional<std::chrono::milliseconds> length;
  if (cooldown_.has_value()) {
    double lo = cooldown_->first, hi = cooldown_->second;
    double u = std::uniform_real_distribution<double>(0.0, 1.0)(random_);
    double seconds = std::clamp(lo * std::pow(2.0, e.timesBlacklisted) + u * lo, lo, hi);
    length = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    e.until = now + *length;
  } else {
    e.until.reset();
  }
  e.timesBlacklisted++;
  return length;
}

bool HostRegistry::isBlacklisted(const std::string& host, Clock::time_point now) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end() || !it->second.blacklisted) return false;
  return !it->second.until.has_value() || now < *it->second.until;
}

std::vector<HostSlots> HostRegistry::available(Clock::time_point now) const {
  std::vector<HostSlots> out;
  for (const auto& name : order_) {
    const Entry& e = hosts_.at(name);
    if (e.discovered && e.slots > 0 && !isBlacklisted(name, now)) out.push_back({name, e.slots});
  }
  return out;
}

bool HostRegistry::allBlacklistedForGood() const {
  bool any = false;
  for (const auto& [name, e] : hosts_) {
    if (!e.discovered) continue;
    any = true;
    if (!e.blacklisted || e.until.has_value()) return false;
  }
  return any;
}

}  // namespace hvd::elastic
