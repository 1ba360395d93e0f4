// NameReaper: removes this process's named shared-memory segments (HOROVOD_SHM_NAMED=1) when the
// process dies, however it dies (SIGKILL included, at any point of setup).
//
// A name is registered before shm_open creates it and unregistered once unlinked. The first
// registration starts a helper process (fork) that holds the other end of a socket pair and
// keeps the list of registered names; when this process goes away its end closes, and the
// helper unlinks whatever is still registered and exits. The helper leaves the process group
// (before any name is registered: start() waits for its word) and ignores SIGINT/SIGTERM/SIGHUP (a launcher stopping the job's group must not kill it before
// it has done its work), closes every other descriptor (it must not keep sockets, pipes or
// segments of the rank open), and only calls async-signal-safe functions.
//
// Thread-safe. Anonymous (memfd) segments need none of this: they have no name.
#pragma once

#include <string>

namespace hvd::shm {

class NameReaper {
 public:
  static NameReaper& instance();
  // Registers `name` (a shm_open name, at most kMaxName bytes) for removal at process death.
  // Throws hvd::Error when the helper cannot be started (then the caller must not create it).
  void add(const std::string& name);
  // The name was unlinked: nothing to do for it any more. Never throws.
  void remove(const std::string& name);

  static constexpr size_t kMaxName = 250;

 private:
  NameReaper() = default;
  void start();  // caller holds mu_
  void send(char op, const std::string& name);
};

}  // namespace hvd::shm
