#include "store/file_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/hmac.h"
#include "common/socket.h"
#include "horovod/errors.h"
#include "store/store_util.h"

namespace hvd {
namespace {

constexpr size_t kMaxEncodedName = 200;

std::string sysError(const std::string& what) {
  return what + ": " + std::strerror(errno) + " (errno " + std::to_string(errno) + ")";
}

void makeDirectories(const std::string& path) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      throw StoreError(sysError("FileStore cannot create directory " + partial));
    }
  }
}

// Key -> file name: "k_" + percent-encoded key (or a hash for very long keys). Temporary and
// lock files start with '.', so they never collide with keys.
std::string encodeKey(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (out.size() > kMaxEncodedName) {
    Digest d = sha256(key.data(), key.size());
    out = "h_" + toHex(d.data(), d.size());
  }
  return out;
}

// Unique temporary names within this process and across processes.
std::string uniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  uint8_t random[8];
  randomBytes(random, sizeof(random));
  return std::to_string(::getpid()) + "." + std::to_string(counter++) + "." + toHex(random, sizeof(random));
}

}  // namespace

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  if (path_.empty()) throw StoreError("FileStore needs a directory path");
  makeDirectories(path_);
}

std::string FileStore::fileFor(const std::string& key) const { return path_ + "/" + encodeKey(key); }

bool FileStore::tryRead(const std::string& key, Bytes& out) const {
  Socket fd(::open(fileFor(key).c_str(), O_RDONLY | O_CLOEXEC));  // Socket: any owned fd
  if (!fd.valid()) {
    if (errno == ENOENT) return false;
    throw StoreError(sysError("FileStore cannot read key '" + key + "'"));
  }
  out.clear();
  uint8_t chunk[65536];
  while (true) {
    ssize_t n = ::read(fd.fd(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw StoreError(sysError("FileStore cannot read key '" + key + "'"));
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  return true;
}

void FileStore::writeAtomically(const std::string& key, const Bytes& value) const {
  std::string tmp = path_ + "/.tmp." + uniqueSuffix();
  Socket fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) throw StoreError(sysError("FileStore cannot write " + tmp));
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd.fd(), value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = sysError("FileStore cannot write key '" + key + "'");
      ::unlink(tmp.c_str());
      throw StoreError(why);
    }
    done += static_cast<size_t>(n);
  }
  fd.close();
  if (::rename(tmp.c_str(), fileFor(key).c_str()) != 0) {
    std::string why = sysError("FileStore cannot publish key '" + key + "'");
    ::unlink(tmp.c_str());
    throw StoreError(why);
  }
}

void FileStore::set(const std::string& key, const Bytes& value, Deadline) { writeAtomically(key, value); }

std::vector<std::string> FileStore::waitUntilPresent(const std::vector<std::string>& keys, Deadline deadline) const {
  // Watch first, then check, so a file that appears in between still wakes us.
  Socket watch(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (watch.valid() && ::inotify_add_watch(watch.fd(), path_.c_str(), IN_MOVED_TO | IN_CREATE | IN_CLOSE_WRITE) < 0) {
    watch.close();
  }
  int backoffMs = 1;
  while (true) {
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (::access(fileFor(key).c_str(), F_OK) != 0) missing.push_back(key);
    }
    if (missing.empty() || deadline.expired()) return missing;
    int waitMs = deadline.pollTimeoutMs(backoffMs);
    backoffMs = std::min(backoffMs * 2, 100);
    if (watch.valid()) {
      pollfd p{watch.fd(), POLLIN, 0};
      if (::poll(&p, 1, waitMs) > 0) {
        char events[4096];
        while (::read(watch.fd(), events, sizeof(events)) > 0) {
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(waitMs));
    }
  }
}

Bytes FileStore::get(const std::string& key, Deadline deadline) {
  Bytes value;
  while (!tryRead(key, value)) {
    if (!waitUntilPresent({key}, deadline).empty()) {
      throw Timeout(store_detail::timeoutMessage("get", {key}, "file store " + path_));
    }
  }
  return value;
}

void FileStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  auto missing = waitUntilPresent(keys, deadline);
  if (!missing.empty()) throw Timeout(store_detail::timeoutMessage("wait", missing, "file store " + path_));
}

int64_t FileStore::add(const std::string& key, int64_t delta, Deadline deadline) {
  std::string lockPath = path_ + "/.lock." + encodeKey(key);
  Socket lock(::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) throw StoreError(sysError("FileStore cannot open lock file " + lockPath));
  int backoffMs = 1;
  while (::flock(lock.fd(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) throw StoreError(sysError("FileStore cannot lock " + lockPath));
    if (deadline.expired()) {
      throw Timeout("Timed out in add on rendezvous key '" + key + "' waiting for the lock " + lockPath);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(deadline.pollTimeoutMs(backoffMs)));
    backoffMs = std::min(backoffMs * 2, 20);
  }
  Bytes current;
  // A throw releases the lock with its descriptor.
  int64_t value =
      store_detail::addToCounter(key, tryRead(key, current) ? store_detail::parseCounter(key, current) : 0, delta);
  writeAtomically(key, store_detail::formatCounter(value));
  ::flock(lock.fd(), LOCK_UN);
  return value;
}

}  // namespace hvd
