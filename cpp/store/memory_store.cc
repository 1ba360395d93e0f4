#include "store/memory_store.h"

#include "horovod/errors.h"
#include "store/store_util.h"

namespace hvd {

template <typename Pred>
bool MemoryStore::waitFor(std::unique_lock<std::mutex>& lock, Deadline deadline, Pred pred) {
  if (deadline.isNever()) {
    changed_.wait(lock, pred);
    return true;
  }
  return changed_.wait_until(lock, deadline.at(), pred);
}

void MemoryStore::set(const std::string& key, const Bytes& value, Deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!waitFor(lock, deadline, [&] { return data_.count(key) > 0; })) {
    throw Timeout(store_detail::timeoutMessage("get", {key}, "memory store"));
  }
  return data_[key];
}

int64_t MemoryStore::add(const std::string& key, int64_t delta, Deadline) {
  int64_t result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    int64_t current = it == data_.end() ? 0 : store_detail::parseCounter(key, it->second);
    result = store_detail::addToCounter(key, current, delta);
    data_[key] = store_detail::formatCounter(result);
  }
  changed_.notify_all();
  return result;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto allSet = [&] {
    for (const auto& k : keys) {
      if (data_.count(k) == 0) return false;
    }
    return true;
  };
  if (!waitFor(lock, deadline, allSet)) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (data_.count(k) == 0) missing.push_back(k);
    }
    throw Timeout(store_detail::timeoutMessage("wait", missing, "memory store"));
  }
}

}  // namespace hvd
