// ProcessSetTable: this rank's registered process sets (id 0 = all ranks). Read by enqueueing
// threads (validation) and the engine's thread; changed only by the engine's thread when it
// processes an add/remove response, and by init. What moves a set's data (a communicator) belongs
// to the collective backend that runs it (backend.h), not to the set.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <vector>

#include <chrono>
#include <cstdint>

namespace hvd::engine {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int> ranks;  // ascending global ranks
  int myIndex = -1;        // this rank's set rank, -1 if not a member
};

// What enqueue-time validation needs, copied out under the lock.
struct ProcessSetInfo {
  int size = 0;
  int myIndex = -1;
  bool rootIsMember = false;  // for the `root` passed to lookup()
};

class ProcessSetTable {
 public:
  explicit ProcessSetTable(int myRank) : myRank_(myRank) {}

  void add(int32_t id, std::vector<int> ranks);
  void remove(int32_t id);
  // Any thread.
  std::optional<ProcessSetInfo> lookup(int32_t id, int root = -1) const;
  std::optional<std::vector<int>> ranks(int32_t id) const;
  std::vector<int> ids() const;
  // Id of a registered set with exactly these ranks, or -1.
  int32_t find(const std::vector<int>& ranks) const;
  // Engine thread only (the table is not changed concurrently with it).
  ProcessSet* get(int32_t id);
  void clear();

 private:
  int myRank_;
  mutable std::shared_mutex mu_;
  std::map<int32_t, std::unique_ptr<ProcessSet>> sets_;
};

}  // namespace hvd::engine
