#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/check.h"
#include "transport/shm/name_reaper.h"

namespace hvd::shm {
namespace {

std::string errnoText(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

uint8_t* mapFd(int fd, size_t bytes, const std::string& what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    throw Error("shm: cannot map " + what + " (" + std::to_string(bytes) + " bytes): " + errnoText(err));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    fd_ = other.fd_;
    name_ = std::move(other.name_);
    owner_ = other.owner_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.fd_ = -1;
    other.name_.clear();
    other.owner_ = false;
  }
  return *this;
}

Segment Segment::create(size_t bytes, bool named, const std::string& name) {
  Segment seg;
  seg.owner_ = true;
  seg.size_ = bytes;
  if (!named) {
    seg.fd_ = ::memfd_create("horovod-shm", MFD_CLOEXEC);
    if (seg.fd_ < 0) throw Error("shm: memfd_create failed: " + errnoText(errno));
    if (::ftruncate(seg.fd_, static_cast<off_t>(bytes)) != 0) {
      throw Error("shm: cannot size a shared segment to " + std::to_string(bytes) + " bytes: " + errnoText(errno));
    }
  } else {
    HVD_CHECK(!name.empty() && name[0] == '/') << "bad shm name '" << name << "'";
    // Registered before it exists: a kill between here and seal() cannot leave it behind.
    NameReaper::instance().add(name);
    seg.fd_ = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (seg.fd_ < 0 && errno == EEXIST) {
      // Left by an earlier crashed job with the same id: the id is unique per job and init
      // round, so nobody else can be using it.
      ::shm_unlink(name.c_str());
      seg.fd_ = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (seg.fd_ < 0) {
      int err = errno;
      NameReaper::instance().remove(name);
      throw Error("shm: shm_open('" + name + "') failed: " + errnoText(err));
    }
    seg.name_ = name;  // from here on, reset() unlinks it
    if (::ftruncate(seg.fd_, static_cast<off_t>(bytes)) != 0) {
      throw Error("shm: cannot size '" + name + "' to " + std::to_string(bytes) + " bytes: " + errnoText(errno));
    }
    int err = ::posix_fallocate(seg.fd_, 0, static_cast<off_t>(bytes));
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      throw Error("shm: cannot reserve " + std::to_string(bytes) + " bytes in /dev/shm for '" + name +
                  "': " + errnoText(err) +
                  ". /dev/shm is too small (containers: raise --shm-size), or lower HOROVOD_SHM_RING_BYTES / "
                  "HOROVOD_SHM_SPACE_BYTES.");
    }
  }
  seg.data_ = mapFd(seg.fd_, bytes, named ? "'" + name + "'" : "a memfd segment");
  return seg;
}

Segment Segment::open(const std::string& descriptor, size_t bytes) {
  int fd = -1;
  std::string what;
  if (descriptor.rfind("fd:", 0) == 0) {
    long pid = 0, num = 0;
    if (std::sscanf(descriptor.c_str(), "fd:%ld:%ld", &pid, &num) != 2) {
      throw Error("shm: bad segment descriptor '" + descriptor + "'");
    }
    what = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(num);
    fd = ::open(what.c_str(), O_RDWR | O_CLOEXEC);
  } else if (descriptor.rfind("name:", 0) == 0) {
    what = descriptor.substr(5);
    fd = ::shm_open(what.c_str(), O_RDWR | O_CLOEXEC, 0600);
  } else {
    throw Error("shm: bad segment descriptor '" + descriptor + "'");
  }
  if (fd < 0) throw Error("shm: cannot open peer segment " + what + ": " + errnoText(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    int err = errno;
    ::close(fd);
    throw Error("shm: peer segment " + what + " has " + std::to_string(st.st_size) + " bytes, expected " +
                std::to_string(bytes) + (err ? " (" + errnoText(err) + ")" : "") +
                " (do all ranks use the same HOROVOD_SHM_* settings?)");
  }
  Segment seg;
  try {
    seg.data_ = mapFd(fd, bytes, what);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // the mapping keeps the memory; peers never need the fd
  seg.size_ = bytes;
  return seg;
}

std::string Segment::descriptor() const {
  if (!name_.empty()) return "name:" + name_;
  return "fd:" + std::to_string(::getpid()) + ":" + std::to_string(fd_);
}

void Segment::seal() {
  if (!name_.empty()) {
    ::shm_unlink(name_.c_str());
    NameReaper::instance().remove(name_);
    name_.clear();
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Segment::discardPages() {
  if (!owner_ || fd_ < 0 || size_ == 0) return;
  ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(size_));
}

void Segment::reset() {
  if (owner_) seal();
  if (fd_ >= 0) ::close(fd_);
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
  owner_ = false;
}

std::string segmentName(const std::string& jobId, const std::string& tag) {
  std::string clean;
  for (char c : jobId) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    clean += ok ? c : '_';
  }
  if (clean.size() > 120) {
    // Keep it unique: FNV-1a of the full id replaces the tail.
    uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : jobId) h = (h ^ c) * 1099511628211ULL;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    clean = clean.substr(0, 100) + hex;
  }
  return "/hvd-" + clean + "-" + tag;
}

}  // namespace hvd::shm
