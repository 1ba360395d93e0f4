// Completing a TensorFlow asynchronous kernel after its compute call has returned.
//
// TensorFlow's C API hands compute_async_func a TF_AsyncOpKernelDoneCallback*, which is the
// address of AsyncOpKernel::ComputeAsync's by-value std::function<void()> argument: it dies when
// the compute call returns, so the pointer cannot be kept. TF_RunAsyncOpKernelDoneCallback only
// calls that std::function. A kernel that wants to return its thread to TensorFlow and finish
// later therefore keeps a copy of the std::function (DeferredDone), made while the original is
// alive, and later hands the copy's address to TF_RunAsyncOpKernelDoneCallback.
//
// That relies on TensorFlow and this library agreeing on std::function<void()>'s layout
// (libstdc++'s: the functor storage, then the manager and the invoker pointers). deferredDoneWorks()
// checks it once per process against the loaded TensorFlow, in a child that shares nothing it
// could damage; where the check fails the kernels keep the synchronous way (wait before returning).
#pragma once

#include <functional>
#include <string>

#include "tf_c_api.h"

namespace hvd::tf {

// Whether TF_RunAsyncOpKernelDoneCallback of the loaded TensorFlow calls a std::function built by
// this library (checked once, then cached). `why` says why not.
bool deferredDoneWorks(const TfApi& api, std::string* why = nullptr);

// A copy of a kernel's done callback that outlives the compute call. Made inside the compute
// call; run() exactly once, from any thread.
class DeferredDone {
 public:
  explicit DeferredDone(TF_AsyncOpKernelDoneCallback* done)
      : done_(*reinterpret_cast<const std::function<void()>*>(done)) {}
  DeferredDone(const DeferredDone&) = delete;
  DeferredDone& operator=(const DeferredDone&) = delete;

  void run(const TfApi& api) {
    api.RunAsyncOpKernelDoneCallback(reinterpret_cast<TF_AsyncOpKernelDoneCallback*>(&done_));
  }

 private:
  std::function<void()> done_;
};

// Runs tasks in order on one thread of this library's own (started on first use, never joined):
// where kernels finish after the engine completes their collectives. The engine's completion
// callbacks must stay short and must not run TensorFlow code that could start another kernel on
// the engine's thread (an inline executor would), so they only post here.
void postCompletion(std::function<void()> task);

}  // namespace hvd::tf
