// Collective backends: what runs an agreed data response on this rank, chosen per (process set,
// device). The CPU backend (engine/executor.h: fusion buffer + the shm/tcp algorithms of
// collectives/) is the first; an MPI or NCCL backend registers beside it from its own folder and
// the engine picks it up without any other change.
//
// Choice: for a response on device D of process set S, the first registered factory that serves
// D's kind and does not decline (S, D) builds the backend; the Runtime keeps it for (S, D) until
// the set is removed or the Runtime shuts down. Every rank of S makes the same choice (same
// build, same settings), so all run the response through the same backend. A device no factory
// serves is refused at enqueue (InvalidArgument naming the device); a response whose op the
// chosen backend does not support fails on every rank with an error naming both.
//
// Threads: registerBackend() at static-initialization time or before any Runtime uses the
// device kind; everything else runs on the engine's thread (runtime.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/host_resources.h"
#include "engine/message.h"
#include "engine/observer.h"
#include "horovod/types.h"

namespace hvd {
class Transport;
}

namespace hvd::engine {

struct Entry;
struct ProcessSet;

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  // Short name for messages and logs ("cpu", "mpi", "nccl").
  virtual const char* name() const = 0;
  // Whether run() can execute a response of this data kind.
  virtual bool supports(Kind kind) const = 0;
  // Runs `response` on `set` (this rank is a member). entries[i] is this rank's entry for
  // response.tensors[i], or nullptr when this rank did not request it (a joined rank takes part
  // with zeros). Engine-allocated outputs and received splits go into the entries' works;
  // completing the works is the caller's job. Transport failures throw (fatal for the Runtime);
  // other throws fail this response only.
  virtual void run(const Response& response, ProcessSet& set, const std::vector<Entry*>& entries) = 0;
};

// What a factory may look at to build (or decline) a backend.
struct BackendContext {
  const ProcessSet& set;
  Device device;
  Transport& transport;
  // What the Runtime lends backends that work in host memory (fusion buffer, output pool).
  HostResources& host;
  // Where backends publish fusion-copy and collective events (observer.h).
  const ObserverHub& observers;
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
};

// Adds a factory after the ones of its priority or higher registered before (earlier ones are
// preferred).
void registerBackend(BackendFactory factory);
// Whether any factory serves this device kind.
bool backendServes(DeviceKind kind);
// Names of the factories serving `kind`, in preference order ("cpu", ...).
std::vector<std::string> backendNames(DeviceKind kind);

// The wire form of a device (Request/Response::device): kCpuDevice for the CPU, else kind and
// index packed into one integer.
int32_t deviceId(const Device& device);
Device deviceOf(int32_t id);

// The backends of one Runtime, by (process set, device). Engine thread only.
class BackendTable {
 public:
  // The backend for `response`'s device on `set`, built on first use. Throws Error naming the
  // device (no factory accepted it) or naming the backend and the op (unsupported op).
  CollectiveBackend& forResponse(const Response& response, ProcessSet& set, Transport& transport,
                                 HostResources& host, const ObserverHub& observers);
  // Drops the backends of a removed process set.
  void removeSet(int32_t processSet);
  void clear() { backends_.clear(); }

 private:
  std::map<std::pair<int32_t, int32_t>, std::unique_ptr<CollectiveBackend>> backends_;
  // The last lookup: a training loop's responses all go to one backend.
  std::pair<int32_t, int32_t> lastKey_{-1, 0};
  CollectiveBackend* last_ = nullptr;
};

}  // namespace hvd::engine
