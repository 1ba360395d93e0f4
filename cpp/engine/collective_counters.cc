#include "engine/collective_counters.h"

#include <cstring>

#include "horovod/errors.h"

namespace hvd::engine {

CollectiveCounters::Counter& CollectiveCounters::counter(const char* backend, const char* algorithm) {
  const size_t used = used_.load(std::memory_order_relaxed);  // the writer's own count
  for (size_t i = 0; i < used; ++i) {
    if (slots_[i].backend == backend && slots_[i].algorithm == algorithm) return slots_[i].count;
  }
  // The same name may be a different literal in another translation unit.
  for (size_t i = 0; i < used; ++i) {
    if (std::strcmp(slots_[i].backend, backend) == 0 && std::strcmp(slots_[i].algorithm, algorithm) == 0) {
      return slots_[i].count;
    }
  }
  if (used == kSlots) {
    throw Error(std::string("Horovod's collective counters are full (") + std::to_string(kSlots) +
                " (backend, algorithm) pairs); cannot count " + backend + "/" + algorithm);
  }
  Slot& slot = slots_[used];
  slot.backend = backend;
  slot.algorithm = algorithm;
  used_.store(used + 1, std::memory_order_release);
  return slot.count;
}

std::vector<CollectiveCount> CollectiveCounters::snapshot() const {
  const size_t used = used_.load(std::memory_order_acquire);
  std::vector<CollectiveCount> out;
  out.reserve(used);
  for (size_t i = 0; i < used; ++i) {
    out.push_back({slots_[i].backend, slots_[i].algorithm, slots_[i].count.load(std::memory_order_relaxed)});
  }
  return out;
}

}  // namespace hvd::engine
