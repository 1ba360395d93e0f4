// Segment: one shared-memory mapping, created by its owner and opened by its peers.
//
// Two ways to share, chosen per job (see ShmOptions::named):
//  * Anonymous (default): memfd_create; peers open "/proc/<owner pid>/fd/<fd>" while the owner
//    holds the fd. Nothing ever has a name, so nothing can be left behind, whatever is killed
//    when. memfd memory is not limited by the size of /dev/shm (Docker's 64 MiB default).
//  * Named (fallback when /proc/<pid>/fd cannot be opened, e.g. hardened /proc or separate pid
//    namespaces): shm_open under "/hvd-<job>-<tag>"; the owner unlinks the name as soon as every
//    peer has mapped it, and in its destructor if that never happened; if the process dies
//    first (SIGKILL included), a helper process unlinks it (name_reaper.h). Space is reserved with
//    fallocate so a full /dev/shm is a clean error at init instead of SIGBUS later.
//
// A peer refers to a segment by its descriptor string ("fd:<pid>:<fd>" or "name:<name>"),
// exchanged through the store. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::shm {

class Segment {
 public:
  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Segment(Segment&& other) noexcept { *this = std::move(other); }
  Segment& operator=(Segment&& other) noexcept;
  ~Segment() { reset(); }

  // Creates and maps a zero-filled segment of `bytes`. `name` (named mode only) must be a valid
  // shm_open name ("/..."); an existing segment of that name (left by a crashed job with the same
  // id) is replaced. Throws hvd::Error with the reason on failure.
  static Segment create(size_t bytes, bool named, const std::string& name);
  // Maps a peer's segment. Throws hvd::Error when it cannot be opened or has another size.
  static Segment open(const std::string& descriptor, size_t bytes);

  std::string descriptor() const;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool valid() const { return data_ != nullptr; }

  // Owner only: removes the name (named mode) so that the memory goes away with the last
  // mapping; then closes the fd (peers can no longer open it). Idempotent.
  void seal();
  // Owner only, while the fd is open: gives the memory back now, out of every process's
  // mapping (the pages are punched out of the file; a later read anywhere sees zeros). For
  // segments whose peers cache their mappings beyond the owner's use. Best effort: a kernel
  // without hole punching keeps the pages until the last mapping goes.
  void discardPages();
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  std::string name_;  // shm name while it exists and we own it
  bool owner_ = false;
};

// A shm_open-safe name: "/hvd-<sanitized job id>-<tag>", at most ~200 characters.
std::string segmentName(const std::string& jobId, const std::string& tag);

}  // namespace hvd::shm
