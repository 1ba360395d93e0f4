#include "output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/check.h"
#include "process.h"

namespace hvd::launcher {
namespace {

// A partial line longer than this is written out without waiting for its end, so a worker that
// never prints a newline cannot grow the launcher without bound.
constexpr size_t kMaxPartialLine = 1 << 20;

void makeDirectories(const std::string& path) {
  std::string current;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    current = path.substr(0, slash);
    if (!current.empty() && mkdir(current.c_str(), 0755) != 0 && errno != EEXIST) {
      HVD_SYSCHECK(false, "cannot create output directory " + current);
    }
    pos = slash + 1;
  }
}

}  // namespace

LineForwarder::LineForwarder(int rank, bool isStderr, int destFd, int teeFd, bool timestamp)
    : tag_("[" + std::to_string(rank) + "]" + (isStderr ? "<stderr>:" : "<stdout>:")),
      destFd_(destFd),
      teeFd_(teeFd),
      timestamp_(timestamp) {}

LineForwarder::~LineForwarder() {
  if (teeFd_ >= 0) close(teeFd_);
}

std::string LineForwarder::prefix() const {
  if (!timestamp_) return tag_;
  // time.asctime() layout: "Mon Jan  1 12:00:00 2024".
  time_t now = time(nullptr);
  struct tm local;
  localtime_r(&now, &local);
  char buf[64];
  strftime(buf, sizeof(buf), "%a %b %e %H:%M:%S %Y", &local);
  return buf + tag_;
}

void LineForwarder::emit(const std::string& text) {
  if (text.empty()) return;
  if (!destBroken_ && !writeAll(destFd_, text.data(), text.size())) destBroken_ = true;  // e.g. `| head`
  if (teeFd_ >= 0) writeAll(teeFd_, text.data(), text.size());
}

void LineForwarder::feed(const char* data, size_t bytes) {
  std::string out;
  std::string pre;
  size_t start = 0;
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != '\n' && data[i] != '\r') continue;
    if (pre.empty()) pre = prefix();
    out += pre;
    out += partial_;
    out.append(data + start, i + 1 - start);
    partial_.clear();
    start = i + 1;
  }
  partial_.append(data + start, bytes - start);
  if (partial_.size() > kMaxPartialLine) {
    out += prefix() + partial_;
    partial_.clear();
  }
  emit(out);  // one write per chunk: lines of different ranks never interleave mid-line
}

void LineForwarder::finish() {
  if (partial_.empty()) return;
  emit(prefix() + partial_);
  partial_.clear();
}

int openRankOutputFile(const std::string& dir, int rank, int np, bool isStderr) {
  int width = static_cast<int>(std::to_string(np > 1 ? np - 1 : 0).size());
  std::string r = std::to_string(rank);
  if (static_cast<int>(r.size()) < width) r = std::string(width - r.size(), '0') + r;
  std::string rankDir = dir + "/rank." + r;
  makeDirectories(rankDir);
  std::string path = rankDir + (isStderr ? "/stderr" : "/stdout");
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HVD_SYSCHECK(fd >= 0, "cannot open " + path);
  return fd;
}

}  // namespace hvd::launcher
