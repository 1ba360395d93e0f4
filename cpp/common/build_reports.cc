#include "common/build_reports.h"

#include <map>
#include <mutex>

namespace hvd {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::function<BuildReport()>> makers;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void registerBuildReport(const std::string& name, std::function<BuildReport()> make) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.makers[name] = std::move(make);
}

std::optional<BuildReport> buildReport(const std::string& name) {
  std::function<BuildReport()> make;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.makers.find(name);
    if (it == r.makers.end()) return std::nullopt;
    make = it->second;
  }
  return make();
}

std::string reportValue(const BuildReport& report, const std::string& key) {
  for (const auto& [k, v] : report) {
    if (k == key) return v;
  }
  return "";
}

}  // namespace hvd
