// AutotuneLog: the CSV that HOROVOD_AUTOTUNE_LOG names. A header, then one row per sample as it
// completes (flushed, so a job killed mid-run leaves every finished row), then one row with the
// final choice:
//
//   sample,phase,fusion_threshold_bytes,burst_quiet_us,...,hierarchical,score_bytes_per_sec
//   0,warmup,134217728,2,...,1,5.1e+08      warmup samples (discarded)
//   0,sample,134217728,2,...,1,5.3e+08      scored samples, numbered from 0
//   7,final,33554432,0,...,1,6.0e+08        the choice: the scored sample it came from
//
// Every knob of engine/knobs.h has a column, tuned or not (pinned ones keep their value).
#pragma once

#include <fstream>
#include <string>

#include "engine/knobs.h"

namespace hvd::autotune {

class AutotuneLog {
 public:
  // Creates (truncates) the file and writes the header; InvalidArgument if it cannot be opened.
  explicit AutotuneLog(const std::string& path);
  void row(int sample, const char* phase, const engine::Knobs& knobs, double score);
  const std::string& path() const { return path_; }
  static std::string header();

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace hvd::autotune
