// Collective backends: what runs an agreed data response on this rank, chosen per (process set,
// device). This header is the whole seam: the engine names no backend. Backends live in their own
// folders above the engine (cpp/backends/cpu: Horovod's shm/tcp algorithms, cpp/backends/mpi: the
// MPI data plane; a CUDA/NCCL one goes in cpp/backends/cuda), register a BackendFactory from a
// static registrar, and own what they run on (the CPU backend its Communicator per set, the MPI
// one its MPI communicator per set).
//
// Choice: for a response on device D of process set S, the first registered factory that serves
// D's kind and does not decline (S, D) builds the backend; the Runtime keeps it for (S, D) until
// the set is removed or the Runtime shuts down. Every rank of S makes the same choice (same
// build, same settings), so all run the response through the same backend. A device no factory
// serves is refused at enqueue (InvalidArgument naming the device); a response whose op the
// chosen backend does not support fails on every rank with an error naming both.
//
// Configuration reaches backends only through this seam: the job's Config and the knobs in force
// at construction (BackendContext), later knob changes through CollectiveBackend::applyKnobs, and
// settings checked at init through BackendFactory::checkConfig. No backend is selected by
// process-wide state.
//
// Threads: registerBackend() at static-initialization time or before any Runtime uses the
// device kind; everything else runs on the engine's thread (runtime.h).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/collective_counters.h"
#include "engine/config.h"
#include "engine/host_resources.h"
#include "engine/knobs.h"
#include "engine/message.h"
#include "engine/observer.h"
#include "horovod/types.h"

namespace hvd {
class Transport;
}

namespace hvd::engine {

struct Entry;
struct ProcessSet;

// Completion. A host backend finishes its collectives inside run(), and the Runtime completes
// the works right after. A device backend may instead take completion over (deferred
// completion): it is built with CollectiveBackend(Completion::kDeferred), and then
//  - run() only enqueues the device work; before returning normally it takes, for every non-null
//    entry, the entry's work and member (Entry::work, Entry::member) and later completes that
//    member exactly once (WorkImpl::completeMember, with the error if any) from any thread, e.g.
//    its finalizer thread when the device finished. Outputs go into the work before completion.
//  - the Runtime still retires the entries on the engine's thread right after run() (their names
//    can be enqueued again, the entries are reused, kTensorDone is published then): after run()
//    returns the backend must not touch the Entry objects, only the works it took.
//  - when run() throws, the backend has taken nothing: the Runtime completes the works with the
//    error (or, for a fatal error, fails them with the Runtime's).
//  - when the Runtime fails (a lost peer, a timeout, an abort relayed by a peer), it calls
//    abort(error) on every backend on the engine's thread before dropping them: the backend
//    stops its device work (so nothing hangs) and fails every work it still holds with `error`.
//    On a clean shutdown or a removed set the backend is destroyed without abort(): its
//    destructor waits for the device to finish the work already enqueued and completes it.
// The choice is fixed at construction, so the CPU path pays no virtual call for it.
enum class Completion : uint8_t { kInRun, kDeferred };

class CollectiveBackend {
 public:
  explicit CollectiveBackend(Completion completion = Completion::kInRun) : completion_(completion) {}
  virtual ~CollectiveBackend() = default;
  // Whether this backend completes the works of the responses it runs itself (see above).
  bool defersCompletion() const { return completion_ == Completion::kDeferred; }
  // The Runtime failed with `error` (deferred completion only; see above). Engine thread.
  virtual void abort(std::exception_ptr error) {}
  // Short name for messages, logs and counters ("cpu", "mpi", "nccl"); a static string.
  virtual const char* name() const = 0;
  // Whether run() can execute a response of this data kind.
  virtual bool supports(Kind kind) const = 0;
  // Runs `response` on `set` (this rank is a member). entries[i] is this rank's entry for
  // response.tensors[i], or nullptr when this rank did not request it (a joined rank takes part
  // with zeros). Engine-allocated outputs and received splits go into the entries' works;
  // completing the works is the caller's job. Transport failures throw (fatal for the Runtime);
  // other throws fail this response only. A backend with deferred completion completes them
  // itself (see above).
  // Every collective it runs emits kCollectiveStart/kCollectiveEnd with its name and the
  // algorithm (observer.h) and is counted in BackendContext::counters under the same names.
  virtual void run(const Response& response, ProcessSet& set, const std::vector<Entry*>& entries) = 0;
  // The knobs in force changed (every rank alike, before the response list that carries the
  // change). A backend applies the knobs it has and documents the ones it has no use for; the
  // knobs in force when it was built came in its BackendContext.
  virtual void applyKnobs(const Knobs& knobs) = 0;

 private:
  const Completion completion_;
};

// What one Runtime lends all its backends; they outlive every backend built from them.
struct BackendEnvironment {
  const Config* config = nullptr;  // the job's settings (e.g. cpuOperationsMpi, mpiComm, timeout)
  Transport* transport = nullptr;
  // What backends that work in host memory share (fusion buffer, output pool).
  HostResources* host = nullptr;
  // Where backends publish fusion-copy and collective events (observer.h).
  const ObserverHub* observers = nullptr;
  // Where they count their collectives (collective_counters.h).
  CollectiveCounters* counters = nullptr;
  // For backends with deferred completion: called (any thread) after completing works, so that a
  // caller waiting for one of them while it drives the engine stops waiting for messages.
  std::function<void()> wakeEngine;
};

// What a factory may look at to build (or decline) a backend.
struct BackendContext {
  const ProcessSet& set;
  Device device;
  const Config& config;
  const Knobs& knobs;  // in force now; later changes come through CollectiveBackend::applyKnobs
  Transport& transport;
  HostResources& host;
  const ObserverHub& observers;
  CollectiveCounters& counters;
  // See BackendEnvironment::wakeEngine; valid for the backend's lifetime.
  const std::function<void()>& wakeEngine;
};

struct BackendFactory {
  std::string name;
  std::vector<DeviceKind> devices;  // the device kinds it serves
  // A backend for (set, device), or nullptr to decline (the next factory is asked).
  std::function<std::unique_ptr<CollectiveBackend>(const BackendContext&)> make;
  // Higher is asked first; equal priorities keep registration order. A backend that is chosen
  // by a setting (the MPI data plane) ranks above the default one and declines when not asked
  // for, so that static-initialization order does not matter.
  int priority = 0;
  // Optional. Called by every Runtime's init, before any process set exists, whichever backend
  // will be chosen: throws InvalidArgument when `config` (or the HOROVOD_* settings the backend
  // reads itself) cannot work, so that init fails rather than the first collective.
  std::function<void(const Config&)> checkConfig = nullptr;
};

// Adds a factory after the ones of its priority or higher registered before (earlier ones are
// preferred).
void registerBackend(BackendFactory factory);
// Whether any factory serves this device kind.
bool backendServes(DeviceKind kind);
// Names of the factories serving `kind`, in preference order ("cpu", ...).
std::vector<std::string> backendNames(DeviceKind kind);
// Runs every registered factory's checkConfig (Runtime init).
void checkBackendConfigs(const Config& config);

// The wire form of a device (Request/Response::device): kCpuDevice for the CPU, else kind and
// index packed into one integer.
int32_t deviceId(const Device& device);
Device deviceOf(int32_t id);

// The backends of one Runtime, by (process set, device). Engine thread only (attach() and the
// first applyKnobs() also run in init, before the engine's thread starts).
class BackendTable {
 public:
  // What backends are built with from now on (init, before any forResponse()).
  void attach(const BackendEnvironment& environment) { environment_ = environment; }
  // The backend for `device` (deviceId(); this rank's device for the response: ranks may put one
  // collective on different accelerators, e.g. GPU i on local rank i) on `set`, built on first
  // use. Throws Error naming the device (no factory accepted it) or naming the backend and the op
  // (unsupported op).
  CollectiveBackend& forResponse(const Response& response, ProcessSet& set, int32_t device);
  // The knobs in force from now on: handed to every backend built so far, and to later ones at
  // construction.
  void applyKnobs(const Knobs& knobs);
  // Drops the backends of a removed process set.
  void removeSet(int32_t processSet);
  // The Runtime failed: every backend's abort(error) (CollectiveBackend), before clear().
  void abort(std::exception_ptr error);
  // Drops every backend (shutdown: before the transport they use goes).
  void clear() {
    backends_.clear();
    last_ = nullptr;
  }

 private:
  BackendEnvironment environment_;
  Knobs knobs_;
  std::map<std::pair<int32_t, int32_t>, std::unique_ptr<CollectiveBackend>> backends_;
  // The last lookup: a training loop's responses all go to one backend.
  std::pair<int32_t, int32_t> lastKey_{-1, 0};
  CollectiveBackend* last_ = nullptr;
};

}  // namespace hvd::engine
