// Reports that a part compiled into this build publishes for the layers that may not include it:
// the CUDA backend (cpp/backends/cuda) tells the API what it was built with ("cuda") and what its
// loader found ("cuda_libraries"); horovod._core and --check-build read them by name. A report
// that nothing registered means that part is not in this build.
//
// Threads: registerBuildReport() at static-initialization time; buildReport() from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvd {

// (key, value) pairs, in the order the part lists them.
using BuildReport = std::vector<std::pair<std::string, std::string>>;

// Makes `name` answer with what `make` returns (called on every buildReport(name)).
void registerBuildReport(const std::string& name, std::function<BuildReport()> make);

// The report registered under `name`, or nullopt when nothing in this build registered it.
std::optional<BuildReport> buildReport(const std::string& name);

// The value of `key` in `report`, or "" when it has none.
std::string reportValue(const BuildReport& report, const std::string& key);

}  // namespace hvd
