#include "engine/process_set_table.h"

#include <algorithm>
#include <mutex>

namespace hvd::engine {

void ProcessSetTable::add(int32_t id, std::vector<int> ranks) {
  auto set = std::make_unique<ProcessSet>();
  set->id = id;
  set->ranks = std::move(ranks);
  auto it = std::lower_bound(set->ranks.begin(), set->ranks.end(), myRank_);
  if (it != set->ranks.end() && *it == myRank_) {
    set->myIndex = static_cast<int>(it - set->ranks.begin());
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  sets_[id] = std::move(set);
}

void ProcessSetTable::remove(int32_t id) {
  std::unique_ptr<ProcessSet> gone;
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return;
  gone = std::move(it->second);
  sets_.erase(it);
}

std::optional<ProcessSetInfo> ProcessSetTable::lookup(int32_t id, int root) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return std::nullopt;
  const ProcessSet& set = *it->second;
  ProcessSetInfo info;
  info.size = static_cast<int>(set.ranks.size());
  info.myIndex = set.myIndex;
  info.rootIsMember = root >= 0 && std::binary_search(set.ranks.begin(), set.ranks.end(), root);
  return info;
}

std::optional<std::vector<int>> ProcessSetTable::ranks(int32_t id) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return std::nullopt;
  return it->second->ranks;
}

std::vector<int> ProcessSetTable::ids() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& [id, set] : sets_) out.push_back(id);
  return out;
}

int32_t ProcessSetTable::find(const std::vector<int>& ranks) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  for (const auto& [id, set] : sets_) {
    if (set->ranks == ranks) return id;
  }
  return -1;
}

ProcessSet* ProcessSetTable::get(int32_t id) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

void ProcessSetTable::clear() {
  std::map<int32_t, std::unique_ptr<ProcessSet>> gone;
  std::unique_lock<std::shared_mutex> lock(mu_);
  gone.swap(sets_);
}

}  // namespace hvd::engine
