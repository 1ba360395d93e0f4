// Logging with Horovod's format: "[YYYY-mm-dd HH:MM:SS.uuuuuu: LEVEL file:line] message"
// (or "[LEVEL file:line] message" with HOROVOD_LOG_HIDE_TIME=1). TRACE..INFO go to stdout,
// WARNING and above to stderr. The level comes from HOROVOD_LOG_LEVEL.
#pragma once

#include <functional>
#include <sstream>
#include <string>

namespace hvd {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

LogLevel logLevel();
void setLogLevel(LogLevel level);
void setLogHideTime(bool hide);
// Rank to show in messages; -1 (default) shows none.
void setLogRank(int rank);

// Where emitted lines go instead of stdout/stderr (tests capture warnings with it): called with
// the level and the full line (prefix included, no newline), from the logging thread, under a
// lock. An empty function restores the default. Returns the previous sink.
using LogSink = std::function<void(LogLevel, const std::string&)>;
LogSink setLogSink(LogSink sink);

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace hvd

#define HVD_LOG(LEVEL)                                 \
  if (::hvd::LogLevel::k##LEVEL < ::hvd::logLevel()) { \
  } else ::hvd::LogMessage(__FILE__, __LINE__, ::hvd::LogLevel::k##LEVEL).stream()
