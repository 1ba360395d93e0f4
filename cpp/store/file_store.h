// FileStore: a Store in a directory on a filesystem every rank can see (a shared NFS home, or
// /tmp for processes of one host). Each key is one file, written to a temporary name and
// renamed into place, so readers never see a partial value. add() serialises through a lock
// file (flock). Waiters watch the directory with inotify and also re-check on a short backoff,
// since inotify does not see writes made by other NFS clients; the store is not a hot path.
//
// Thread-safe and multi-process-safe. Keys may contain any bytes ('/' included).
#pragma once

#include <string>

#include "horovod/errors.h"
#include "store/store.h"

namespace hvd {

class FileStore : public Store {
 public:
  // Creates `path` (and parents) if missing. Throws StoreError if it cannot.
  explicit FileStore(std::string path);
  void set(const std::string& key, const Bytes& value, Deadline deadline) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;

  const std::string& path() const { return path_; }

 private:
  std::string fileFor(const std::string& key) const;
  // Reads a key's file; false if it does not exist.
  bool tryRead(const std::string& key, Bytes& out) const;
  void writeAtomically(const std::string& key, const Bytes& value) const;
  // Blocks until every key exists or the deadline passes; returns the missing keys.
  std::vector<std::string> waitUntilPresent(const std::vector<std::string>& keys, Deadline deadline) const;

  std::string path_;
};

}  // namespace hvd
