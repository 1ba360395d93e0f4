// FileStore across processes (fork): the rendezvous works between separate address spaces.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "store/file_store.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;

TEST(FileStore, RendezvousAndCountersAcrossProcesses) {
  char tmpl[] = "/tmp/hvd-filestore-mp-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  constexpr int kProcs = 4;
  constexpr int kAdds = 25;
  std::vector<pid_t> children;
  for (int r = 0; r < kProcs; ++r) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(20);  // a hang fails the child, never the whole run
      int code = 0;
      try {
        FileStore store(dir);
        setString(store, "addr/" + std::to_string(r), "proc" + std::to_string(r), Deadline::after(10s));
        for (int q = 0; q < kProcs; ++q) {
          if (getString(store, "addr/" + std::to_string(q), Deadline::after(10s)) != "proc" + std::to_string(q))
            code = 2;
        }
        for (int i = 0; i < kAdds; ++i) store.add("count", 1, Deadline::after(10s));
        store.add("done", 1, Deadline::after(10s));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", r, e.what());
        code = 3;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  FileStore store(dir);
  EXPECT_EQ(getString(store, "count", Deadline::after(1s)), std::to_string(kProcs * kAdds));
  EXPECT_EQ(store.add("done", 0, Deadline::after(1s)), kProcs);
  std::filesystem::remove_all(dir);
}

TEST(FileStore, UnusablePathIsAStoreError) { EXPECT_THROW(FileStore("/proc/self/no/such/place"), StoreError); }

}  // namespace
}  // namespace hvd
