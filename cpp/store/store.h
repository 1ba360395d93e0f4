// Store: the key-value service ranks use to find each other (rendezvous). Implementations:
// MemoryStore (threads of one process), FileStore (a shared directory), TcpStore (a client of
// TcpStoreServer, which horovodrun runs). PrefixStore namespaces keys for one process set or one
// elastic round.
//
// All methods are thread-safe and take a deadline; a call that cannot finish by then throws
// hvd::Timeout naming the keys it waited for. Connection and protocol failures throw StoreError.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace hvd {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value (overwrites).
  virtual void set(const std::string& key, const Bytes& value, Deadline deadline) = 0;
  // Returns the value of key, waiting until some rank has set it.
  virtual Bytes get(const std::string& key, Deadline deadline) = 0;
  // Atomically adds delta to the integer stored at key (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta, Deadline deadline) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
};

// Convenience helpers over any Store.
void setString(Store& store, const std::string& key, const std::string& value, Deadline deadline);
std::string getString(Store& store, const std::string& key, Deadline deadline);

// Wraps a store and prepends "<prefix>/" to every key.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
      : prefix_(std::move(prefix) + "/"), inner_(std::move(inner)) {}
  void set(const std::string& key, const Bytes& value, Deadline deadline) override {
    inner_->set(prefix_ + key, value, deadline);
  }
  Bytes get(const std::string& key, Deadline deadline) override { return inner_->get(prefix_ + key, deadline); }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    return inner_->add(prefix_ + key, delta, deadline);
  }
  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    inner_->wait(full, deadline);
  }

 private:
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace hvd
