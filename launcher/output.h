// Output forwarding: each worker's stdout and stderr are cut into lines and written to the
// launcher's stdout/stderr as "[<rank>]<stdout>:<line>" / "[<rank>]<stderr>:<line>" (with
// --prefix-output-with-timestamp, "<asctime>[<rank>]<stdout>:<line>"). '\n' and '\r' both end a
// line and are kept, so progress bars still redraw; a final partial line is written as is when
// the stream ends. Bytes are passed through undecoded: '\n' and '\r' never occur inside a
// multi-byte UTF-8 sequence, so cutting there is safe.
//
// With --output-filename DIR every prefixed line is also written to DIR/rank.<r>/stdout or
// .../stderr.
//
// Single-threaded: the supervisor's poll loop feeds every stream.
#pragma once

#include <memory>
#include <string>

namespace hvd::launcher {

class LineForwarder {
 public:
  // destFd: 1 or 2. teeFd: per-rank file, or -1. Takes ownership of teeFd.
  LineForwarder(int rank, bool isStderr, int destFd, int teeFd, bool timestamp);
  ~LineForwarder();
  LineForwarder(const LineForwarder&) = delete;
  LineForwarder& operator=(const LineForwarder&) = delete;

  // Forwards every complete line in data; keeps the rest for the next call.
  void feed(const char* data, size_t bytes);
  // Forwards the pending partial line (the stream ended).
  void finish();

 private:
  void emit(const std::string& text);
  std::string prefix() const;

  std::string tag_;      // "[r]<stdout>:"
  int destFd_;
  int teeFd_;
  bool timestamp_;
  bool destBroken_ = false;
  std::string partial_;
};

// Creates DIR/rank.<r>/ and opens its stdout or stderr file for writing (truncating). The rank
// is zero-padded to the number of digits of np-1 (at least one digit, so np=1 gives rank.0).
// Throws hvd::Error naming the path.
int openRankOutputFile(const std::string& dir, int rank, int np, bool isStderr);

}  // namespace hvd::launcher
