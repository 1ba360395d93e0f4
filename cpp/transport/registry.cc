#include <map>
#include <mutex>

#include "common/check.h"
#include "transport/transport.h"

namespace hvd {
namespace {

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, TransportFactory>& factories() {
  static std::map<std::string, TransportFactory> map;
  return map;
}

}  // namespace

void registerTransport(const std::string& name, TransportFactory factory) {
  std::lock_guard<std::mutex> lock(registryMutex());
  factories()[name] = std::move(factory);
}

bool hasTransport(const std::string& name) {
  std::lock_guard<std::mutex> lock(registryMutex());
  return factories().count(name) > 0;
}

std::vector<std::string> transportNames() {
  std::lock_guard<std::mutex> lock(registryMutex());
  std::vector<std::string> names;
  for (const auto& entry : factories()) names.push_back(entry.first);
  return names;
}

std::unique_ptr<Transport> makeTransport(const std::string& requested, const TransportContext& context) {
  std::string name = requested;
  if (name == "auto") {
    // Placement decides: one host -> shm; one rank per host -> tcp; both -> composite.
    std::map<std::string, int> perHost;
    for (const auto& host : context.hostOf) perHost[host]++;
    bool oneHost = perHost.size() <= 1;
    bool onePerHost = perHost.size() == context.hostOf.size();
    if (context.size == 1) {
      name = hasTransport("local") ? "local" : "tcp";
    } else if (oneHost && hasTransport("shm")) {
      name = "shm";
    } else if (onePerHost || !hasTransport("shm+tcp")) {
      name = "tcp";
    } else {
      name = "shm+tcp";
    }
  }
  TransportFactory factory;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = factories().find(name);
    if (it == factories().end()) {
      std::string known;
      for (const auto& entry : factories()) known += (known.empty() ? "" : ", ") + entry.first;
      throw InvalidArgument("Unknown transport '" + name + "' (HOROVOD_TRANSPORT); available: " + known);
    }
    factory = it->second;
  }
  return factory(context);
}

}  // namespace hvd
