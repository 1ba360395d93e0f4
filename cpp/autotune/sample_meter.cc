#include "autotune/sample_meter.h"

#include <algorithm>

#include "horovod/errors.h"

namespace hvd::autotune {
namespace {
constexpr size_t kMaxSeen = 1 << 16;
}  // namespace

SampleMeter::SampleMeter(int stepsPerSample) : stepsPerSample_(stepsPerSample) {
  if (stepsPerSample < 1) throw InvalidArgument("SampleMeter: steps per sample must be >= 1");
}

void SampleMeter::listStart(int64_t nowNs) {
  windowBytes_ += listBytes_;
  listBytes_ = 0;
  listStartNs_ = nowNs;
  boundaryInList_ = false;
}

void SampleMeter::reset() {
  open_ = false;
  steps_ = 0;
  windowBytes_ = 0;
  listBytes_ = 0;
  boundaryInList_ = false;
}

std::optional<double> SampleMeter::collective(const std::vector<std::string_view>& tensors, int64_t bytes) {
  std::optional<double> score;
  if (anchor_.empty()) {
    for (std::string_view name : tensors) {
      if (!seen_.emplace(name).second) {
        anchor_ = std::string(name);
        seen_.clear();
        break;
      }
    }
    // Bounded: a job whose names never recur keeps only the latest ones.
    if (seen_.size() > kMaxSeen) seen_.clear();
  }
  if (!anchor_.empty() && !tensors.empty() && !boundaryInList_) {
    const bool boundary = std::find(tensors.begin(), tensors.end(), std::string_view(anchor_)) != tensors.end();
    if (boundary) {
      boundaryInList_ = true;
      if (open_ && ++steps_ == stepsPerSample_) {
        // The window ends where this list starts; this list opens the next window.
        const int64_t ns = listStartNs_ - windowStartNs_;
        lastSeconds_ = static_cast<double>(ns) * 1e-9;
        lastBytes_ = windowBytes_;
        score = ns > 0 ? static_cast<double>(windowBytes_) / lastSeconds_ : 0.0;
        open_ = false;
      }
      if (!open_) {
        open_ = true;
        steps_ = 0;
        windowStartNs_ = listStartNs_;
        windowBytes_ = 0;  // the current list's bytes so far stay in listBytes_: the new window's
      }
    }
  }
  listBytes_ += bytes;
  return score;
}

}  // namespace hvd::autotune
