#include "async_done.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace hvd::tf {
namespace {

// libstdc++'s std::function<void()>: 16 bytes of functor storage, the manager, the invoker. The
// check below is what makes relying on it safe; this only keeps a build with another standard
// library from compiling something the check would always refuse.
static_assert(sizeof(std::function<void()>) == 32, "expected libstdc++'s std::function layout");

// The check runs in a child process that shares this process's memory (clone with CLONE_VM and
// CLONE_VFORK: no copy of a large address space, no fork handlers): if TensorFlow read the
// std::function differently and crashed, only the child dies.
struct Probe {
  const TfApi* api;
  std::function<void()>* callback;
  volatile int called = 0;
};

int probeChild(void* arg) {
  // Default actions for crashes, in the child only (no CLONE_SIGHAND): a crash handler the
  // parent installed (faulthandler, a crash reporter) must not run here.
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGFPE}) signal(sig, SIG_DFL);
  auto* probe = static_cast<Probe*>(arg);
  probe->api->RunAsyncOpKernelDoneCallback(
      reinterpret_cast<TF_AsyncOpKernelDoneCallback*>(probe->callback));
  _exit(probe->called == 1 ? 0 : 3);
}

bool check(const TfApi& api, std::string& why) {
  Probe probe;
  probe.api = &api;
  std::function<void()> callback = [&probe] { probe.called = probe.called + 1; };
  probe.callback = &callback;
  constexpr size_t kStack = 256 * 1024;
  std::unique_ptr<char[]> stack(new char[kStack]);
  pid_t child = clone(probeChild, stack.get() + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &probe);
  if (child < 0) {
    why = "could not start the check's child process";
    return false;
  }
  int status = 0;
  while (waitpid(child, &status, __WALL) < 0) {
    if (errno != EINTR) {
      why = "could not wait for the check's child process";
      return false;
    }
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && probe.called == 1) return true;
  why = WIFSIGNALED(status)
            ? "TF_RunAsyncOpKernelDoneCallback crashed on this library's std::function (signal " +
                  std::to_string(WTERMSIG(status)) + ")"
            : "TF_RunAsyncOpKernelDoneCallback did not call this library's std::function";
  return false;
}

class Completer {
 public:
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      if (!started_) {
        started_ = true;
        std::thread([this] { loop(); }).detach();
      }
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !tasks_.empty(); });
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool started_ = false;
};

}  // namespace

bool deferredDoneWorks(const TfApi& api, std::string* why) {
  static const std::pair<bool, std::string> result = [&api] {
    std::string reason;
    if (const char* forced = std::getenv("HOROVOD_TF_SYNC_KERNELS"); forced && forced[0] == '1') {
      return std::pair<bool, std::string>{false, "HOROVOD_TF_SYNC_KERNELS=1"};
    }
    bool ok = check(api, reason);
    return std::pair<bool, std::string>{ok, reason};
  }();
  if (why != nullptr) *why = result.second;
  return result.first;
}

void postCompletion(std::function<void()> task) {
  static Completer* completer = new Completer;  // never destroyed: its thread may outlive exit
  completer->post(std::move(task));
}

}  // namespace hvd::tf
