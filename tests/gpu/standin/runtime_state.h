// The stand-in runtime's process-wide state, shared by runtime_state.cc (streams, the ordering
// checker) and runtime_api.cc (the cuda* entry points). Everything is guarded by State::mu; one
// condition variable State::cv is notified whenever a stream completes an op or gains work.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "standin.h"

struct CUstream_st {
  uint64_t id;
};
struct CUevent_st {
  uint64_t id;
};

namespace standin {

// A vector clock: for each stream id, the highest sequence number of that stream's ops known to
// have happened before (sorted by stream id; absent = 0).
using Clock = std::vector<std::pair<uint64_t, uint64_t>>;
uint64_t clockGet(const Clock& clock, uint64_t stream);
void clockRaise(Clock& clock, uint64_t stream, uint64_t seq);
void clockMerge(Clock& into, const Clock& from);

struct Stream;
// "Do not start before `stream` has completed op `seq`."
struct Wait {
  std::shared_ptr<Stream> stream;
  uint64_t seq;
};

struct Op {
  uint64_t seq = 0;
  std::string what;
  std::vector<Wait> waits;
  std::function<void()> run;  // empty for markers (event records, waits, synchronize points)
};

// A work queue run by its own thread. Op i of the stream has seq i (1-based); `completed` is the
// seq of the last op that finished. `clock` is the vector clock of the last queued op.
struct Stream {
  uint64_t id = 0;
  int device = 0;
  bool blocking = true;  // synchronizes with the legacy default stream (not cudaStreamNonBlocking)
  bool legacy = false;   // the device's legacy default stream (handle 0 / cudaStreamLegacy)
  std::string name;
  std::deque<Op> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  Clock clock;
  bool destroyed = false;  // cudaStreamDestroy: the thread drains the queue, then exits
};

// One access of a queued op, remembered until every later op is known to be ordered after it.
struct Record {
  const char* ptr;
  size_t bytes;
  bool write;
  uint64_t stream;
  uint64_t seq;
  std::string what;
  std::string streamName;
};

struct Allocation {
  size_t size = 0;
  int device = 0;
  bool pinned = false;
  bool pooled = false;       // cudaMallocFromPoolAsync: stream-ordered
  std::string freeQueued;    // pooled: the cudaFreeAsync queued for it (its stream), "" if none
  std::vector<Record> records;
};

// A memory pool of cudaMemPoolCreate (allocations are tracked in the table like any other).
struct Pool {
  int device = 0;
  uint64_t releaseThreshold = 0;
};

struct Event {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
  Clock clock;
};

struct State {
  std::mutex mu;
  std::condition_variable cv;
  int devices = 0;  // HVD_STANDIN_DEVICES; <= 0 when the variable is invalid
  std::string devicesError;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  std::vector<Record> hostRecords;              // accesses of memory the table does not know
  std::unordered_map<cudaStream_t, std::shared_ptr<Stream>> streams;  // live created streams
  std::vector<std::shared_ptr<Stream>> running;  // streams whose thread runs, legacy ones included
  std::vector<std::shared_ptr<Stream>> legacy;   // per device, created on first use
  std::unordered_map<cudaEvent_t, std::shared_ptr<Event>> events;
  std::unordered_map<cudaMemPool_t, Pool> pools;  // live pools
  std::vector<cudaError_t> sticky;  // per device: the context's sticky error
  std::vector<int> hostWaiters;     // per device: host threads blocked in a synchronizing call
  Clock host;                       // what the host has observed complete
  uint64_t nextId = 1;
};

// The state (created on first use; a fork child starts with a fresh one, since the parent's
// stream threads do not exist there).
State& state();

// Thread-local last error (cudaGetLastError).
void setLastError(cudaError_t error);
cudaError_t takeLastError();

// The stream a handle names (0 and cudaStreamLegacy: the current device's legacy stream), or
// null with *error set. Requires the lock.
std::shared_ptr<Stream> resolveStream(State& s, cudaStream_t handle, cudaError_t* error);

// Queues an op (see enqueue() in standin.h); requires the lock. `waits`/`after` add an ordering
// edge (cudaStreamWaitEvent). Returns the op's seq and clock through `seq`/`clock` when non-null.
cudaError_t enqueueLocked(State& s, const std::shared_ptr<Stream>& stream, std::string what,
                          const std::vector<Access>& accesses, std::function<void()> run, std::vector<Wait> waits = {},
                          const Clock* after = nullptr, uint64_t* seq = nullptr, Clock* clock = nullptr);

// The host has seen everything `clock` covers complete (a synchronize or a successful query):
// later ops are ordered after it and its records are dropped. Requires the lock.
void hostObserved(State& s, const Clock& clock);

// Blocks (releasing the lock) until `stream` has completed op `seq`; counted in
// State::hostWaiters of the stream's device while it blocks.
void waitCompleted(State& s, std::unique_lock<std::mutex>& lock, const Stream& stream, uint64_t seq);

// Starts the thread of a new stream and registers it as running. Requires the lock.
std::shared_ptr<Stream> startStream(State& s, int device, bool blocking, bool legacy);

// lookupMemory() for a caller that holds the lock.
MemInfo lookupMemoryLocked(State& s, const void* ptr);

// The device's sticky error, or cudaSuccess. Requires the lock.
cudaError_t stickyError(State& s, int device);

}  // namespace standin
