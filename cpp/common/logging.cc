#include "common/logging.h"

#include <sys/time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace hvd {
namespace {

LogLevel levelFromEnv() {
  const char* value = std::getenv("HOROVOD_LOG_LEVEL");
  if (value == nullptr) return LogLevel::kWarning;
  std::string v(value);
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "trace") return LogLevel::kTrace;
  if (v == "debug") return LogLevel::kDebug;
  if (v == "info") return LogLevel::kInfo;
  if (v == "error") return LogLevel::kError;
  if (v == "fatal") return LogLevel::kFatal;
  return LogLevel::kWarning;  // Horovod: unknown -> warning
}

bool hideTimeFromEnv() {
  const char* value = std::getenv("HOROVOD_LOG_HIDE_TIME");
  return value != nullptr && std::atoi(value) > 0;
}

std::atomic<int> gLevel{static_cast<int>(levelFromEnv())};
std::atomic<bool> gHideTime{hideTimeFromEnv()};
std::atomic<int> gRank{-1};
std::atomic<bool> gHasSink{false};
std::mutex gSinkMu;
LogSink gSink;  // guarded by gSinkMu

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kFatal: return "FATAL";
  }
  return "?";
}

}  // namespace

LogLevel logLevel() { return static_cast<LogLevel>(gLevel.load(std::memory_order_relaxed)); }
void setLogLevel(LogLevel level) { gLevel = static_cast<int>(level); }
void setLogHideTime(bool hide) { gHideTime = hide; }
void setLogRank(int rank) { gRank = rank; }

LogSink setLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(gSinkMu);
  LogSink previous = std::move(gSink);
  gSink = std::move(sink);
  gHasSink = static_cast<bool>(gSink);
  return previous;
}

LogMessage::LogMessage(const char* file, int line, LogLevel level) : file_(file), line_(line), level_(level) {
  const char* slash = std::strrchr(file_, '/');
  if (slash != nullptr) file_ = slash + 1;
}

LogMessage::~LogMessage() {
  std::string prefix = "[";
  if (!gHideTime) {
    timeval tv;
    gettimeofday(&tv, nullptr);
    tm local;
    localtime_r(&tv.tv_sec, &local);
    char stamp[64];
    size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
    std::snprintf(stamp + n, sizeof(stamp) - n, ".%06ld: ", static_cast<long>(tv.tv_usec));
    prefix += stamp;
  }
  prefix += levelName(level_);
  prefix += " ";
  prefix += file_;
  prefix += ":" + std::to_string(line_);
  if (gRank >= 0) prefix += " rank " + std::to_string(gRank.load());
  prefix += "] ";
  if (gHasSink.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(gSinkMu);
    if (gSink) {
      gSink(level_, prefix + stream_.str());
      return;
    }
  }
  std::string text = prefix + stream_.str() + "\n";
  FILE* out = level_ >= LogLevel::kWarning ? stderr : stdout;
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

}  // namespace hvd
