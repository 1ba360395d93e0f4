#include "engine/backend.h"

#include <algorithm>
#include <mutex>

#include "common/check.h"
#include "common/logging.h"
#include "engine/process_set_table.h"

namespace hvd::engine {
namespace {

std::mutex& registryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<BackendFactory>& registry() {
  static std::vector<BackendFactory> factories;
  return factories;
}

bool serves(const BackendFactory& f, DeviceKind kind) {
  return std::find(f.devices.begin(), f.devices.end(), kind) != f.devices.end();
}

}  // namespace

void registerBackend(BackendFactory factory) {
  std::lock_guard<std::mutex> lock(registryMutex());
  auto& r = registry();
  auto at = std::find_if(r.begin(), r.end(), [&](const BackendFactory& f) { return f.priority < factory.priority; });
  r.insert(at, std::move(factory));
}

bool backendServes(DeviceKind kind) {
  std::lock_guard<std::mutex> lock(registryMutex());
  return std::any_of(registry().begin(), registry().end(), [&](const auto& f) { return serves(f, kind); });
}

std::vector<std::string> backendNames(DeviceKind kind) {
  std::lock_guard<std::mutex> lock(registryMutex());
  std::vector<std::string> names;
  for (const auto& f : registry()) {
    if (serves(f, kind)) names.push_back(f.name);
  }
  return names;
}

void checkBackendConfigs(const Config& config) {
  std::vector<BackendFactory> factories;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    factories = registry();
  }
  for (const auto& f : factories) {
    if (f.checkConfig) f.checkConfig(config);
  }
}

int32_t deviceId(const Device& device) {
  if (device.isCpu()) return kCpuDevice;
  return (static_cast<int32_t>(device.kind) << 16) | (device.index & 0xffff);
}

Device deviceOf(int32_t id) {
  Device device;
  if (id == kCpuDevice) return device;
  device.kind = static_cast<DeviceKind>(id >> 16);
  device.index = id & 0xffff;
  return device;
}

CollectiveBackend& BackendTable::forResponse(const Response& r, ProcessSet& set, int32_t deviceOnRank) {
  const std::pair<int32_t, int32_t> key{set.id, deviceOnRank};
  CollectiveBackend* backend = last_;
  if (backend == nullptr || key != lastKey_) {
    auto it = backends_.find(key);
    if (it == backends_.end()) {
      const Device device = deviceOf(deviceOnRank);
      std::vector<BackendFactory> candidates;
      {
        std::lock_guard<std::mutex> lock(registryMutex());
        for (const auto& f : registry()) {
          if (serves(f, device.kind)) candidates.push_back(f);
        }
      }
      HVD_CHECK(environment_.transport != nullptr) << "collective backends used before the Runtime attached them";
      std::unique_ptr<CollectiveBackend> made;
      for (const auto& f : candidates) {
        made = f.make(BackendContext{set, device, *environment_.config, knobs_, *environment_.transport,
                                     *environment_.host, *environment_.observers, *environment_.counters,
                                     environment_.wakeEngine});
        if (made) break;
      }
      if (!made) {
        throw Error("No collective backend runs " + std::string(kindName(r.params.kind)) + " on device " +
                    deviceName(device) + " for process set " + std::to_string(set.id) +
                    (candidates.empty() ? std::string(" (this build has none for that device)")
                                        : std::string(" (every backend for that device declined it)")));
      }
      HVD_LOG(Debug) << "process set " << set.id << " runs on " << deviceName(device) << " through the " << made->name()
                     << " collective backend";
      it = backends_.emplace(key, std::move(made)).first;
    }
    backend = it->second.get();
    last_ = backend;
    lastKey_ = key;
  }
  if (!backend->supports(r.params.kind)) {
    throw Error(std::string("The ") + backend->name() + " collective backend does not support " +
                std::string(kindName(r.params.kind)) + " on device " + deviceName(deviceOf(deviceOnRank)) + ".");
  }
  return *backend;
}

void BackendTable::applyKnobs(const Knobs& knobs) {
  knobs_ = knobs;
  for (auto& [key, backend] : backends_) backend->applyKnobs(knobs);
}

void BackendTable::abort(std::exception_ptr error) {
  for (auto& [key, backend] : backends_) {
    if (backend->defersCompletion()) backend->abort(error);
  }
}

void BackendTable::removeSet(int32_t processSet) {
  for (auto it = backends_.begin(); it != backends_.end();) {
    it = it->first.first == processSet ? backends_.erase(it) : std::next(it);
  }
  last_ = nullptr;
}

}  // namespace hvd::engine
