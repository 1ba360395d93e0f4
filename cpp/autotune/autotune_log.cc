#include "autotune/autotune_log.h"

#include <cstdio>

#include "autotune/knob_space.h"
#include "horovod/errors.h"

namespace hvd::autotune {

std::string AutotuneLog::header() {
  std::string h = "sample,phase";
  for (int i = 0; i < kNumKnobs; ++i) h += std::string(",") + knobColumn(static_cast<KnobId>(i));
  return h + ",score_bytes_per_sec";
}

AutotuneLog::AutotuneLog(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw InvalidArgument("HOROVOD_AUTOTUNE_LOG='" + path + "': cannot open the file for writing");
  out_ << header() << '\n';
  out_.flush();
}

void AutotuneLog::row(int sample, const char* phase, const engine::Knobs& knobs, double score) {
  out_ << sample << ',' << phase;
  for (int i = 0; i < kNumKnobs; ++i) out_ << ',' << knobText(static_cast<KnobId>(i), knobs);
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", score);
  out_ << ',' << text << '\n';
  out_.flush();
}

}  // namespace hvd::autotune
