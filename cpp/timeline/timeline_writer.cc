#include "timeline/timeline_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/logging.h"
#include "horovod/errors.h"

namespace hvd::timeline {
namespace {

int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t epochNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What the end of a segment costs: the closing event and "]" (reserved so a segment never
// exceeds its share even when it is closed).
constexpr int64_t kTrailerReserve = 160;

void appendMicros(std::string& out, double us) {
  char buf[48];
  int n = std::snprintf(buf, sizeof(buf), "%.3f", us);
  out.append(buf, static_cast<size_t>(n));
}

}  // namespace

std::string jsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string activityName(Activity activity, engine::Kind op) {
  switch (activity) {
    case Activity::kNegotiate: return "NEGOTIATE_" + std::string(engine::kindName(op));
    case Activity::kRankReady: return "RANK_READY";
    case Activity::kQueue: return "QUEUE";
    case Activity::kCopyIn: return "MEMCPY_IN_FUSION_BUFFER";
    case Activity::kCollective: return std::string(engine::kindName(op));
    case Activity::kCopyOut: return "MEMCPY_OUT_FUSION_BUFFER";
    case Activity::kCycleStart: return "CYCLE_START";
  }
  return "UNKNOWN";
}

TimelineWriter::TimelineWriter(std::string path, WriterOptions options)
    : path_(std::move(path)), options_(options), originNs_(steadyNowNs()), originEpochUs_(epochNowUs()) {
  queue_.reserve(options_.queueCapacity);
  // Segments of an earlier timeline at this path would read as this one's.
  std::remove((path_ + ".head").c_str());
  std::remove((path_ + ".1").c_str());
  openSegment();
  flushText();
  thread_ = std::thread([this] { run(); });
}

TimelineWriter::~TimelineWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    HVD_LOG(Error) << "Timeline: closing " << path_ << " failed: " << e.what();
  }
}

void TimelineWriter::addRow(uint32_t row, std::string_view name) {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    newRows_.emplace_back(row, std::string(name));
    notify = arrivedLocked();
  }
  if (notify) wake_.notify_one();
}

void TimelineWriter::pushInstant(std::string_view name, int64_t timeNs, std::string args) {
  std::string line = "{\"name\":\"" + jsonEscape(name) + "\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":";
  appendMicros(line, micros(timeNs));
  line += ",\"args\":" + args + "}";
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    newInstants_.push_back(std::move(line));
    notify = arrivedLocked();
  }
  if (notify) wake_.notify_one();
}

void TimelineWriter::push(std::span<const Record> records) {
  size_t accepted;
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    const size_t before = queue_.size();
    const size_t room = options_.queueCapacity - std::min(before, options_.queueCapacity);
    accepted = std::min(room, records.size());
    queue_.insert(queue_.end(), records.begin(), records.begin() + static_cast<std::ptrdiff_t>(accepted));
    // Wake the writer when it sleeps (the first record after a quiet spell) or once the queue is
    // half full; not at every push.
    notify = arrivedLocked() || (before < options_.queueCapacity / 2 && queue_.size() >= options_.queueCapacity / 2);
  }
  if (accepted < records.size()) dropped_.fetch_add(records.size() - accepted, std::memory_order_relaxed);
  if (notify) wake_.notify_one();
}

void TimelineWriter::close() {
  std::lock_guard<std::mutex> closeLock(closeMu_);
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void TimelineWriter::run() {
  std::vector<Record> batch;
  batch.reserve(options_.queueCapacity);
  std::vector<std::pair<uint32_t, std::string>> rows;
  std::vector<std::string> instants;
  bool last = false;
  while (!last) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      waitForBatch(lock);
      last = closing_;
      batch.swap(queue_);
      rows.swap(newRows_);
      instants.swap(newInstants_);
    }
    try {
      writeBatch(batch, rows, instants, dropped_.load(std::memory_order_relaxed));
      if (last) endSegment();
    } catch (const std::exception& e) {
      HVD_LOG(Error) << "Timeline: writing " << path_ << " failed: " << e.what() << "; the timeline stops";
      if (file_ != nullptr) std::fclose(file_);
      file_ = nullptr;
    }
    batch.clear();
    rows.clear();
    instants.clear();
  }
}

void TimelineWriter::waitForBatch(std::unique_lock<std::mutex>& lock) {
  // Nothing queued: sleep until the next arrival (push wakes an idle writer) or close().
  if (!pendingLocked()) {
    writerIdle_ = true;
    wake_.wait(lock, [&] { return closing_ || !writerIdle_; });
    writerIdle_ = false;
  }
  // Something queued: batch while records keep arriving; write once none came for a whole
  // quiet interval, when the batch is flushInterval old, at half capacity, or when closing.
  const auto batchDeadline = std::chrono::steady_clock::now() + options_.flushInterval;
  const auto full = [&] { return closing_ || queue_.size() >= options_.queueCapacity / 2; };
  while (!full()) {
    const uint64_t seen = arrivals_;
    const auto now = std::chrono::steady_clock::now();
    if (now >= batchDeadline) return;
    const auto until = std::min<std::chrono::steady_clock::time_point>(batchDeadline, now + options_.quietInterval);
    if (wake_.wait_until(lock, until, full)) return;
    if (arrivals_ == seen) return;  // quiet: the producer stopped, the file catches up now
  }
}

void TimelineWriter::writeBatch(const std::vector<Record>& records,
                                const std::vector<std::pair<uint32_t, std::string>>& rows,
                                const std::vector<std::string>& instants, uint64_t droppedNow) {
  if (file_ == nullptr) return;
  for (const auto& [row, name] : rows) {
    if (rowNames_.size() < row) rowNames_.resize(row);
    rowNames_[row - 1] = name;
    emit("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(row) + ",\"args\":{\"name\":\"" +
         jsonEscape(name) + "\"}}");
  }
  for (const Record& r : records) emit(format(r));
  for (const std::string& line : instants) emit(line);
  if (droppedNow != droppedReported_) {
    std::string line = "{\"name\":\"TIMELINE_DROPPED\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":";
    appendMicros(line, micros(steadyNowNs()));
    line += ",\"args\":{\"dropped_events\":" + std::to_string(droppedNow) + "}}";
    emit(line);
    droppedReported_ = droppedNow;
  }
  flushText();
}

double TimelineWriter::micros(int64_t steadyNs) const { return static_cast<double>(steadyNs - originNs_) / 1000.0; }

std::string TimelineWriter::format(const Record& r) const {
  std::string line;
  line.reserve(160);
  line += "{\"name\":\"";
  if (r.activity == Activity::kRankReady) {
    line += std::to_string(r.rank);  // Horovod names the arrival after the rank
  } else {
    line += activityName(r.activity, r.op);
  }
  line += "\",\"ph\":\"";
  const bool span = r.activity != Activity::kRankReady && r.activity != Activity::kCycleStart;
  line += span ? "X" : "i";
  line += "\",\"pid\":0,\"tid\":";
  line += std::to_string(r.activity == Activity::kCycleStart ? 0 : r.row);
  line += ",\"ts\":";
  appendMicros(line, micros(r.startNs));
  if (span) {
    line += ",\"dur\":";
    appendMicros(line, static_cast<double>(std::max<int64_t>(r.endNs - r.startNs, 0)) / 1000.0);
  } else {
    line += r.activity == Activity::kCycleStart ? ",\"s\":\"g\"" : ",\"s\":\"t\"";
  }
  switch (r.activity) {
    case Activity::kRankReady: line += ",\"args\":{\"rank\":" + std::to_string(r.rank) + "}"; break;
    case Activity::kCollective:
      line += ",\"args\":{\"algorithm\":\"";
      line += r.algorithm != nullptr ? r.algorithm : "";
      line += "\",\"bytes\":" + std::to_string(r.bytes) + ",\"process_set\":" + std::to_string(r.processSet) +
              ",\"fused_tensors\":" + std::to_string(r.fused) + "}";
      break;
    case Activity::kCopyIn:
    case Activity::kCopyOut:
      line += ",\"args\":{\"bytes\":" + std::to_string(r.bytes) + ",\"fused_tensors\":" + std::to_string(r.fused) + "}";
      break;
    case Activity::kNegotiate: line += ",\"args\":{\"process_set\":" + std::to_string(r.processSet) + "}"; break;
    default: break;
  }
  line += "}";
  return line;
}

void TimelineWriter::emit(const std::string& line) {
  const int64_t share = options_.maxBytes <= 0 ? 0
                        : headKept_            ? rotatingShare(options_.maxBytes)
                                               : headShare(options_.maxBytes);
  const int64_t size = static_cast<int64_t>(line.size()) + 2;
  const int64_t used = segmentBytes_ + static_cast<int64_t>(text_.size());
  // A segment holding only its header is never rotated (it could not shrink).
  if (share > 0 && used > headerBytes_ && used + size + kTrailerReserve > share) {
    flushText();
    endSegment();
    // The first segment is kept as the head; later ones rotate through path.1.
    const std::string to = path_ + (headKept_ ? ".1" : ".head");
    if (std::rename(path_.c_str(), to.c_str()) != 0) {
      throw Error("cannot rename " + path_ + " to " + to + ": " + std::strerror(errno));
    }
    headKept_ = true;
    rotations_.fetch_add(1, std::memory_order_relaxed);
    openSegment();
  }
  text_ += line;
  text_ += ",\n";
}

void TimelineWriter::flushText() {
  if (file_ == nullptr || text_.empty()) return;
  if (std::fwrite(text_.data(), 1, text_.size(), file_) != text_.size() || std::fflush(file_) != 0) {
    throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  }
  segmentBytes_ += static_cast<int64_t>(text_.size());
  text_.clear();
}

void TimelineWriter::openSegment() {
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) throw Error("Timeline: cannot open " + path_ + " for writing: " + std::strerror(errno));
  segmentBytes_ = 0;
  text_ = "[\n";
  text_ += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"Horovod rank 0\"}},\n";
  text_ += "{\"name\":\"start_time_since_epoch_in_micros\",\"ph\":\"M\",\"pid\":0,\"args\":{\"value\":" +
           std::to_string(originEpochUs_) + "}},\n";
  text_ += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"engine\"}},\n";
  for (size_t i = 0; i < rowNames_.size(); ++i) {
    text_ += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(i + 1) +
             ",\"args\":{\"name\":\"" + jsonEscape(rowNames_[i]) + "\"}},\n";
  }
  headerBytes_ = static_cast<int64_t>(text_.size());
}

void TimelineWriter::endSegment() {
  if (file_ == nullptr) return;
  flushText();
  text_ = "{\"name\":\"timeline_end\",\"ph\":\"M\",\"pid\":0,\"args\":{\"dropped_events\":" +
          std::to_string(dropped_.load(std::memory_order_relaxed)) + "}}\n]\n";
  flushText();
  std::fclose(file_);
  file_ = nullptr;
}

}  // namespace hvd::timeline
