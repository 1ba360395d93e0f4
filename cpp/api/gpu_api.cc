// The GPU queries of horovod.h, from what the CUDA backend (when compiled in) reports through
// common/build_reports.h: the API may not include the backend itself.
#include "common/build_reports.h"
#include "horovod/horovod.h"

namespace hvd {

bool cudaBuilt() { return buildReport("cuda").has_value(); }

int ncclBuilt() {
  auto report = buildReport("cuda");
  return report ? std::stoi(reportValue(*report, "nccl_version_code")) : 0;
}

std::vector<std::pair<std::string, std::string>> cudaLibraries() {
  auto report = buildReport("cuda_libraries");
  return report ? *report : BuildReport{};
}

}  // namespace hvd
