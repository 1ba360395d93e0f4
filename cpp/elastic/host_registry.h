// The elastic driver's view of the hosts: what discovery last reported, in order of first
// appearance (older hosts first, so that rank 0 stays on a surviving old host), minus the
// blacklisted ones.
//
// A host whose worker failed is blacklisted: for good without a cooldown range, else for
// clamp(lo * 2^n + U(0,1) * lo, lo, hi) seconds on its n-th blacklisting (n from 0), after which
// it counts as added again when discovery still reports it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "elastic/slots.h"

namespace hvd::elastic {

class HostRegistry {
 public:
  using Clock = std::chrono::steady_clock;

  // cooldownRange: (lo, hi) seconds; nullopt: blacklisting is for good.
  explicit HostRegistry(std::optional<std::pair<double, double>> cooldownRange, uint64_t seed = std::random_device{}());

  bool hasCooldown() const { return cooldown_.has_value(); }

  // Records discovery's latest answer.
  void setDiscovered(const std::vector<HostSlots>& hosts);
  // Blacklists `host` (from now). Returns the cooldown, or nullopt for a permanent blacklisting.
  std::optional<std::chrono::milliseconds> blacklist(const std::string& host, Clock::time_point now);
  bool isBlacklisted(const std::string& host, Clock::time_point now) const;

  // Discovered, not blacklisted hosts, oldest first.
  std::vector<HostSlots> available(Clock::time_point now) const;
  // Whether every discovered host is blacklisted for good (no cooldown will bring one back).
  bool allBlacklistedForGood() const;
  // Whether discovery reported at least one host that is not blacklisted right now.
  bool empty(Clock::time_point now) const { return available(now).empty(); }

 private:
  struct Entry {
    int slots = 0;
    bool discovered = false;
    int timesBlacklisted = 0;
    bool blacklisted = false;                 // for good (no cooldown range) or until `until`
    std::optional<Clock::time_point> until;   // cooldown end
  };
  std::optional<std::pair<double, double>> cooldown_;
  std::mt19937_64 random_;
  std::vector<std::string> order_;  // first appearance
  std::map<std::string, Entry> hosts_;
};

}  // namespace hvd::elastic
