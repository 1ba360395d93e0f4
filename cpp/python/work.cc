#include "work.h"

#include <nanobind/stl/vector.h>

#include <utility>

namespace hvd::py {
namespace {

struct Orphan {
  WorkPtr work;
  std::vector<nb::ndarray<>> arrays;
};
// Touched only with the GIL held. Leaked on purpose: it may hold Python objects, which must not
// be released after the interpreter has finalized.
std::vector<Orphan>* orphans = new std::vector<Orphan>();

}  // namespace

PyWork::~PyWork() {
  if (work_ && !keepAlive_.empty() && !work_->isCompleted()) {
    orphans->push_back({std::move(work_), std::move(keepAlive_)});
  }
}

void PyWork::wait() {
  if (work_->isCompleted()) {
    work_->wait();  // rethrows a failure; returns at once otherwise
    return;
  }
  // The engine's wait spins briefly, then blocks on a condition variable.
  nb::gil_scoped_release release;
  work_->wait();
}

nb::list PyWork::outputs() const {
  nb::list result;
  for (const auto& t : work_->outputs()) {
    // `reference`: the array already owns a keep-alive of the engine's storage; never copy.
    result.append(nb::cast(toResult(t), nb::rv_policy::reference));
  }
  return result;
}

void reapOrphans() {
  if (orphans->empty()) return;
  std::vector<Orphan> keep;
  for (auto& o : *orphans) {
    if (!o.work->isCompleted()) keep.push_back(std::move(o));
  }
  orphans->swap(keep);
}

void dropOrphans() { orphans->clear(); }

void bindWork(nb::module_& m) {
  nb::class_<PyWork>(m, "Work",
                     "Handle of an asynchronous collective: poll(), wait(), then the results.")
      .def("poll", &PyWork::poll, "True once the operation has completed (successfully or not).")
      .def("wait", &PyWork::wait, "Blocks until completion; raises the operation's error.")
      .def("outputs", &PyWork::outputs,
           "Engine-allocated outputs (allgather/alltoall), zero-copy DLPack arrays.")
      .def("received_splits", &PyWork::receivedSplits, "Alltoall: rows received from each rank.")
      .def("join_result", &PyWork::joinResult, "Join: the rank that joined last.");
}

}  // namespace hvd::py
