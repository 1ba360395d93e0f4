// PyWork: the Python face of an asynchronous collective (hvd::Work) plus the arrays it reads and
// writes. Holding the arrays here is what makes the zero-copy views safe: the memory of every
// tensor the engine touches stays alive until the operation has completed.
//
// All methods are called with the GIL held; wait() releases it while blocking.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <vector>

#include "arrays.h"
#include "horovod/horovod.h"

namespace hvd::py {

class PyWork {
 public:
  PyWork(WorkPtr work, std::vector<nb::ndarray<>> keepAlive)
      : work_(std::move(work)), keepAlive_(std::move(keepAlive)) {}
  // If the operation is still running, its arrays are parked (see reapOrphans) instead of being
  // released under the engine's feet.
  ~PyWork();
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  bool poll() const { return work_->isCompleted(); }
  // Blocks until completion (GIL released; a short spin, then blocking waits that let signal
  // handlers run between slices, so Ctrl-C interrupts a hung collective) and
  // rethrows the operation's failure.
  void wait();
  // Engine-allocated outputs (allgather, alltoall), zero-copy; valid after wait().
  nb::list outputs() const;
  std::vector<int32_t> receivedSplits() const { return work_->receivedSplits(); }
  int joinResult() const { return work_->joinResult(); }

 private:
  WorkPtr work_;
  std::vector<nb::ndarray<>> keepAlive_;
};

// Blocks until `work` completes, as PyWork::wait() does (GIL held on entry and on return; released
// only while the operation is still running), and rethrows its failure.
void waitWork(Work& work);
// Keeps `arrays` and `owner` alive until `work` has completed (a dropped handle of a running
// operation).
void parkOrphan(WorkPtr work, std::vector<nb::ndarray<>> arrays, nb::object owner = {});
// Releases the arrays of dropped, now completed operations. Cheap when there are none.
void reapOrphans();
// Called after shutdown: every pending operation has failed, so all parked arrays can go.
void dropOrphans();

void bindWork(nb::module_& m);

}  // namespace hvd::py
