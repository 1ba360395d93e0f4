// Streams, the ordering checker and the allocation table of the stand-in runtime.
#include "runtime_state.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace standin {
namespace {

State* g_state = nullptr;
std::once_flag g_once;
thread_local cudaError_t t_lastError = cudaSuccess;

void readDeviceCount(State& s) {
  const char* env = std::getenv("HVD_STANDIN_DEVICES");
  s.devices = 2;
  if (env == nullptr) return;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*env == '\0' || *end != '\0' || n < 1 || n > 64) {
    s.devices = 0;
    s.devicesError = "HVD_STANDIN_DEVICES='" + std::string(env) + "' is not a device count in [1, 64]";
  } else {
    s.devices = static_cast<int>(n);
  }
}

State* newState() {
  auto* s = new State();  // never destroyed: stream threads may outlive static destructors
  readDeviceCount(*s);
  s->sticky.assign(static_cast<size_t>(std::max(s->devices, 0)), cudaSuccess);
  s->hostWaiters.assign(static_cast<size_t>(std::max(s->devices, 0)), 0);
  s->legacy.resize(static_cast<size_t>(std::max(s->devices, 0)));
  return s;
}

// fork(): hold the lock across it so the child's copy is consistent; the child, which has none
// of the parent's stream threads, starts over with a fresh state.
void forkPrepare() { g_state->mu.lock(); }
void forkParent() { g_state->mu.unlock(); }
void forkChild() {
  g_state = newState();
  t_lastError = cudaSuccess;
}

void runStream(State* s, std::shared_ptr<Stream> stream) {
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [&] { return !stream->queue.empty() || stream->destroyed; });
    if (stream->queue.empty()) break;
    const Op& front = stream->queue.front();
    s->cv.wait(lock, [&] {
      return std::all_of(front.waits.begin(), front.waits.end(),
                         [](const Wait& w) { return w.stream->completed >= w.seq; });
    });
    Op op = std::move(stream->queue.front());
    stream->queue.pop_front();
    if (op.run) {
      lock.unlock();
      op.run();
      lock.lock();
    }
    stream->completed = op.seq;
    s->cv.notify_all();
  }
  s->running.erase(std::remove(s->running.begin(), s->running.end(), stream), s->running.end());
}

bool overlaps(const Record& r, const Access& a) {
  const char* p = static_cast<const char*>(a.ptr);
  return p < r.ptr + r.bytes && r.ptr < p + a.bytes;
}

std::vector<Record>& recordsFor(State& s, const void* ptr) {
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = s.allocations.upper_bound(addr);
  if (it != s.allocations.begin()) {
    --it;
    if (addr < it->first + it->second.size) return it->second.records;
  }
  return s.hostRecords;
}

std::string describe(const void* ptr, size_t bytes) {
  std::ostringstream out;
  out << "[" << ptr << ", +" << bytes << " bytes)";
  MemInfo info = lookupMemoryLocked(state(), ptr);
  if (info.kind == MemKind::kDevice)
    out << " of device " << info.device << "'s allocation " << static_cast<const void*>(info.base) << " (" << info.size
        << " bytes)";
  else if (info.kind == MemKind::kPinned)
    out << " of pinned host allocation " << static_cast<const void*>(info.base) << " (" << info.size << " bytes)";
  else out << " of host memory";
  return out.str();
}

// Drops the records a new access makes redundant: a checked write is ordered after every record
// it overlaps, so those it covers can never be the first to conflict with a later op; a read
// covers the earlier reads of its own stream.
void addRecord(std::vector<Record>& records, Record record) {
  const char* end = record.ptr + record.bytes;
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const Record& r) {
                                 bool covered = r.ptr >= record.ptr && r.ptr + r.bytes <= end;
                                 return covered && (record.write || (!r.write && r.stream == record.stream));
                               }),
                records.end());
  records.push_back(std::move(record));
}

}  // namespace

State& state() {
  std::call_once(g_once, [] {
    g_state = newState();
    pthread_atfork(forkPrepare, forkParent, forkChild);
  });
  return *g_state;
}

void report(const std::string& message) {
  std::string line = "hvd-cuda-standin: " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

cudaError_t fail(cudaError_t error, const std::string& message) {
  report(message);
  t_lastError = error;
  return error;
}

void setLastError(cudaError_t error) { t_lastError = error; }
cudaError_t takeLastError() {
  cudaError_t e = t_lastError;
  t_lastError = cudaSuccess;
  return e;
}

uint64_t clockGet(const Clock& clock, uint64_t stream) {
  auto it = std::lower_bound(clock.begin(), clock.end(), std::make_pair(stream, uint64_t{0}));
  return it != clock.end() && it->first == stream ? it->second : 0;
}

void clockRaise(Clock& clock, uint64_t stream, uint64_t seq) {
  auto it = std::lower_bound(clock.begin(), clock.end(), std::make_pair(stream, uint64_t{0}));
  if (it != clock.end() && it->first == stream) it->second = std::max(it->second, seq);
  else clock.insert(it, {stream, seq});
}

void clockMerge(Clock& into, const Clock& from) {
  for (const auto& [stream, seq] : from) clockRaise(into, stream, seq);
}

MemInfo lookupMemoryLocked(State& s, const void* ptr) {
  MemInfo info;
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = s.allocations.upper_bound(addr);
  if (it == s.allocations.begin()) return info;
  --it;
  if (addr >= it->first + it->second.size) return info;
  info.kind = it->second.pinned ? MemKind::kPinned : MemKind::kDevice;
  info.device = it->second.device;
  info.base = reinterpret_cast<const char*>(it->first);
  info.size = it->second.size;
  return info;
}

MemInfo lookupMemory(const void* ptr) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return lookupMemoryLocked(s, ptr);
}

int deviceCount() { return state().devices; }

cudaError_t stickyError(State& s, int device) {
  if (device < 0 || device >= static_cast<int>(s.sticky.size())) return cudaSuccess;
  return s.sticky[static_cast<size_t>(device)];
}

std::shared_ptr<Stream> startStream(State& s, int device, bool blocking, bool legacy) {
  auto stream = std::make_shared<Stream>();
  stream->id = s.nextId++;
  stream->device = device;
  stream->blocking = blocking;
  stream->legacy = legacy;
  stream->name = legacy ? "legacy default stream of device " + std::to_string(device)
                        : "stream #" + std::to_string(stream->id) + " (device " + std::to_string(device) + ")";
  s.running.push_back(stream);
  std::thread(runStream, &s, stream).detach();
  return stream;
}

std::shared_ptr<Stream> resolveStream(State& s, cudaStream_t handle, cudaError_t* error) {
  if (handle == nullptr || handle == cudaStreamLegacy) {
    int device = currentDevice();
    if (device < 0) {
      *error = cudaErrorInitializationError;
      return nullptr;
    }
    auto& slot = s.legacy[static_cast<size_t>(device)];
    if (!slot) slot = startStream(s, device, true, true);
    return slot;
  }
  if (handle == cudaStreamPerThread) {
    *error = fail(cudaErrorNotSupported, "cudaStreamPerThread is not modelled by the stand-in; create a stream");
    return nullptr;
  }
  auto it = s.streams.find(handle);
  if (it == s.streams.end()) {
    *error = fail(cudaErrorInvalidResourceHandle,
                  "stream handle " + streamName(handle) + " is not a live stream (destroyed, or never created)");
    return nullptr;
  }
  return it->second;
}

std::string streamName(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return "the legacy default stream";
  if (stream == cudaStreamPerThread) return "cudaStreamPerThread";
  std::ostringstream out;
  out << static_cast<const void*>(stream);
  return out.str();
}

cudaError_t enqueueLocked(State& s, const std::shared_ptr<Stream>& stream, std::string what,
                          const std::vector<Access>& accesses, std::function<void()> run, std::vector<Wait> waits,
                          const Clock* after, uint64_t* seqOut, Clock* clockOut) {
  if (cudaError_t sticky = stickyError(s, stream->device)) {
    setLastError(sticky);
    return sticky;
  }
  Clock clock = stream->clock;
  clockMerge(clock, s.host);
  if (after) clockMerge(clock, *after);
  // The legacy default stream: its ops wait for all earlier work of the device's blocking
  // streams, and their ops wait for its earlier work (cudaStreamNonBlocking streams opt out).
  if (stream->legacy) {
    for (const auto& other : s.running) {
      if (other->device != stream->device || other->legacy || !other->blocking || other->enqueued == 0) continue;
      waits.push_back({other, other->enqueued});
      clockMerge(clock, other->clock);
    }
  } else if (stream->blocking) {
    const auto& legacy = s.legacy[static_cast<size_t>(stream->device)];
    if (legacy && legacy->enqueued > 0) {
      waits.push_back({legacy, legacy->enqueued});
      clockMerge(clock, legacy->clock);
    }
  }
  uint64_t seq = stream->enqueued + 1;
  clockRaise(clock, stream->id, seq);

  for (const Access& a : accesses) {
    if (a.bytes == 0) continue;
    auto freed = s.allocations.upper_bound(reinterpret_cast<uintptr_t>(a.ptr));
    if (freed != s.allocations.begin() && !(--freed)->second.freeQueued.empty() &&
        reinterpret_cast<uintptr_t>(a.ptr) < freed->first + freed->second.size) {
      s.sticky[static_cast<size_t>(stream->device)] = cudaErrorLaunchFailure;
      return fail(cudaErrorLaunchFailure, "use after free: " + what + " (op " + std::to_string(seq) + " of " +
                                              stream->name + ") " + (a.write ? "writes " : "reads ") +
                                              describe(a.ptr, a.bytes) + ", whose " + freed->second.freeQueued +
                                              " is already queued. The device's context is now in error (sticky "
                                              "cudaErrorLaunchFailure).");
    }
    for (const Record& r : recordsFor(s, a.ptr)) {
      if (!overlaps(r, a) || !(a.write || r.write) || r.stream == stream->id) continue;
      if (clockGet(clock, r.stream) >= r.seq) continue;
      std::ostringstream msg;
      msg << "ordering error: " << what << " (op " << seq << " of " << stream->name << ") "
          << (a.write ? "writes " : "reads ") << describe(a.ptr, a.bytes) << ", which " << r.what << " (op " << r.seq
          << " of " << r.streamName << ") " << (r.write ? "writes" : "reads") << " at "
          << static_cast<const void*>(r.ptr) << " +" << r.bytes << " bytes; " << stream->name
          << " is not ordered after that op (no cudaStreamWaitEvent chain from it, and the host has not "
             "observed its completion). The device's context is now in error (sticky cudaErrorLaunchFailure).";
      s.sticky[static_cast<size_t>(stream->device)] = cudaErrorLaunchFailure;
      return fail(cudaErrorLaunchFailure, msg.str());
    }
  }

  stream->enqueued = seq;
  stream->clock = clock;
  for (const Access& a : accesses) {
    if (a.bytes == 0) continue;
    addRecord(recordsFor(s, a.ptr),
              {static_cast<const char*>(a.ptr), a.bytes, a.write, stream->id, seq, what, stream->name});
  }
  if (seqOut) *seqOut = seq;
  if (clockOut) *clockOut = clock;
  stream->queue.push_back({seq, std::move(what), std::move(waits), std::move(run)});
  s.cv.notify_all();
  return cudaSuccess;
}

void hostObserved(State& s, const Clock& clock) {
  clockMerge(s.host, clock);
  auto seen = [&](const Record& r) { return clockGet(s.host, r.stream) >= r.seq; };
  for (auto& [base, alloc] : s.allocations)
    alloc.records.erase(std::remove_if(alloc.records.begin(), alloc.records.end(), seen), alloc.records.end());
  s.hostRecords.erase(std::remove_if(s.hostRecords.begin(), s.hostRecords.end(), seen), s.hostRecords.end());
}

void waitCompleted(State& s, std::unique_lock<std::mutex>& lock, const Stream& stream, uint64_t seq) {
  if (stream.completed >= seq) return;
  int& waiters = s.hostWaiters[static_cast<size_t>(stream.device)];
  ++waiters;
  s.cv.wait(lock, [&] { return stream.completed >= seq; });
  --waiters;
}

cudaError_t enqueue(cudaStream_t handle, std::string what, std::vector<Access> accesses, std::function<void()> run,
                    int requiredDevice) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto stream = resolveStream(s, handle, &error);
  if (!stream) return error;
  if (requiredDevice >= 0 && stream->device != requiredDevice)
    return fail(cudaErrorInvalidResourceHandle, what + ": " + stream->name + " belongs to device " +
                                                    std::to_string(stream->device) + ", the call runs on device " +
                                                    std::to_string(requiredDevice));
  return enqueueLocked(s, stream, std::move(what), accesses, std::move(run));
}

}  // namespace standin
