// SharedTestStore: a test-only Store in anonymous shared memory, usable by the threads of one
// process and, after fork(), by its child processes (no files, no sockets, nothing left behind).
// A robust process-shared mutex survives a child killed while holding it; waiters block on a
// process-shared condition variable (CLOCK_MONOTONIC) with their deadline.
#pragma once

#include <pthread.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

#include "horovod/errors.h"
#include "store/store.h"

namespace hvd::shm::testing {

class SharedTestStore : public Store {
 public:
  static constexpr int kEntries = 1024;
  static constexpr size_t kKeyBytes = 192;
  static constexpr size_t kValueBytes = 1024;

  SharedTestStore() {
    void* p = ::mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("SharedTestStore: mmap failed");
    table_ = static_cast<Table*>(p);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&table_->mutex, &ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&table_->changed, &ca);
  }
  ~SharedTestStore() override { ::munmap(table_, sizeof(Table)); }

  void set(const std::string& key, const Bytes& value, Deadline deadline) override {
    Lock lock(table_);
    setLocked(key, value);
  }

  Bytes get(const std::string& key, Deadline deadline) override {
    Lock lock(table_);
    Entry* e = waitFor(key, deadline);
    return Bytes(e->value, e->value + e->length);
  }

  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    Lock lock(table_);
    int64_t value = 0;
    if (Entry* e = find(key)) value = std::stoll(std::string(e->value, e->value + e->length));
    value += delta;
    std::string text = std::to_string(value);
    setLocked(key, Bytes(text.begin(), text.end()));
    return value;
  }

  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    Lock lock(table_);
    for (const auto& key : keys) waitFor(key, deadline);
  }

  std::string getText(const std::string& key, Deadline deadline) {
    Bytes b = get(key, deadline);
    return std::string(b.begin(), b.end());
  }
  void setText(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()), Deadline::never());
  }
  bool has(const std::string& key) {
    Lock lock(table_);
    return find(key) != nullptr;
  }

 private:
  struct Entry {
    char key[kKeyBytes];
    uint32_t length;
    uint8_t value[kValueBytes];
  };
  struct Table {
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    int used;
    Entry entries[kEntries];
  };
  // Bounded: a process stopped (SIGSTOP) while holding the mutex makes every other user fail
  // with StoreError after kLockSeconds instead of hanging the test (the robust mutex only
  // covers an owner that died).
  static constexpr int kLockSeconds = 30;
  struct Lock {
    explicit Lock(Table* t) : table(t) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += kLockSeconds;
      int rc = pthread_mutex_timedlock(&table->mutex, &until);
      if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(&table->mutex);
      } else if (rc != 0) {
        throw StoreError("SharedTestStore: could not take the store's mutex within " + std::to_string(kLockSeconds) +
                         " s (is a process that holds it stopped?)");
      }
    }
    ~Lock() { pthread_mutex_unlock(&table->mutex); }
    Table* table;
  };

  Entry* find(const std::string& key) {
    for (int i = 0; i < table_->used; ++i) {
      if (key == table_->entries[i].key) return &table_->entries[i];
    }
    return nullptr;
  }

  // Mutex held.
  void setLocked(const std::string& key, const Bytes& value) {
    if (key.size() >= kKeyBytes || value.size() > kValueBytes)
      throw InvalidArgument("SharedTestStore: too big: " + key);
    Entry* e = find(key);
    if (e == nullptr) {
      if (table_->used == kEntries) throw StoreError("SharedTestStore: full");
      e = &table_->entries[table_->used++];
      std::memcpy(e->key, key.c_str(), key.size() + 1);
    }
    if (!value.empty()) std::memcpy(e->value, value.data(), value.size());
    e->length = static_cast<uint32_t>(value.size());
    pthread_cond_broadcast(&table_->changed);
  }

  // Mutex held.
  Entry* waitFor(const std::string& key, Deadline deadline) {
    for (;;) {
      if (Entry* e = find(key)) return e;
      if (deadline.expired()) throw Timeout("SharedTestStore: timed out waiting for '" + key + "'");
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      long ms = deadline.pollTimeoutMs(200);
      ts.tv_sec += ms / 1000;
      ts.tv_nsec += (ms % 1000) * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
      }
      if (pthread_cond_timedwait(&table_->changed, &table_->mutex, &ts) == EOWNERDEAD) {
        pthread_mutex_consistent(&table_->mutex);
      }
    }
  }

  Table* table_;
};

}  // namespace hvd::shm::testing
