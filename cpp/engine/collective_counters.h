// CollectiveCounters: how many collectives each (backend, algorithm) ran since the Runtime's
// init, for tests and benchmarks (hvd::engineCounters(), hvd.engine_counters()). One per Runtime,
// lent to every backend through BackendContext.
//
// What is counted: one per kCollectiveEnd a backend emits (observer.h), with the same backend
// and algorithm names, whether or not an observer watches. A backend counts through its shared
// base (backends/host_backend.h), never directly.
//
// Cost: counter(backend, algorithm) looks its slot up (a few pointer compares; a new pair takes
// the next slot of a fixed table, published with a release store); a backend keeps the slot of
// its last algorithm, so the steady state is one relaxed load and store per collective: no lock,
// allocation or atomic read-modify-write.
//
// Threads: counter() and increment() on the engine's thread (one writer at a time: the engine's
// token orders them); snapshot() from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace hvd::engine {

struct CollectiveCount {
  std::string backend;    // CollectiveBackend::name(): "cpu", "mpi", ...
  std::string algorithm;  // EngineEvent::algorithm of its collective events: "ring", "mpi_allreduce", ...
  uint64_t count = 0;
};

class CollectiveCounters {
 public:
  using Counter = std::atomic<uint64_t>;

  // The counter of (backend, algorithm), both static strings; created at zero on first use.
  // Throws Error when the table is full (a backend naming ever new algorithms).
  Counter& counter(const char* backend, const char* algorithm);
  // One more collective on `c` (single writer: see Threads above).
  static void increment(Counter& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  // Every pair counted so far, in order of first use. Any thread.
  std::vector<CollectiveCount> snapshot() const;

 private:
  struct Slot {
    const char* backend = nullptr;
    const char* algorithm = nullptr;
    Counter count{0};
  };
  // Far above what the backends name (the CPU backend ~12 routines, MPI 6).
  static constexpr size_t kSlots = 128;
  std::array<Slot, kSlots> slots_;
  std::atomic<size_t> used_{0};  // slots [0, used_) are filled; published with release
};

}  // namespace hvd::engine
