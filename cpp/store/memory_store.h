// MemoryStore: a Store shared by the threads of one process (tests; size-1 jobs without a
// rendezvous server). Waiters block on a condition variable; no polling.
#pragma once

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "horovod/errors.h"
#include "store/store.h"

namespace hvd {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  void set(const std::string& key, const Bytes& value, Deadline deadline) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;

 private:
  // Waits (mu_ held) until pred() or the deadline; returns pred().
  template <typename Pred>
  bool waitFor(std::unique_lock<std::mutex>& lock, Deadline deadline, Pred pred);

  std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, Bytes> data_;
};

}  // namespace hvd
