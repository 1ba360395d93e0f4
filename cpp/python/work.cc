#include "work.h"

#include <nanobind/stl/vector.h>

#include <chrono>
#include <utility>

namespace hvd::py {
namespace {

constexpr auto kSignalCheckInterval = std::chrono::milliseconds(100);

struct Orphan {
  WorkPtr work;
  std::vector<nb::ndarray<>> arrays;
  nb::object owner;
};
// Touched only with the GIL held. Leaked on purpose: it may hold Python objects, which must not
// be released after the interpreter has finalized.
std::vector<Orphan>* orphans = new std::vector<Orphan>();

}  // namespace

PyWork::~PyWork() {
  if (work_ && !keepAlive_.empty() && !work_->isCompleted()) {
    orphans->push_back({std::move(work_), std::move(keepAlive_), {}});
  }
}

void PyWork::wait() { waitWork(*work_); }

void waitWork(Work& work) {
  if (!work.isCompleted()) {
    nb::gil_scoped_release release;
    // In slices, so that Ctrl-C (and other signal handlers) still get to run. waitFor runs the
    // engine on this thread when it can, else polls briefly and then blocks.
    while (!work.isCompleted()) {
      if (work.waitFor(kSignalCheckInterval)) return;  // completed (rethrows a failure)
      nb::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
  }
  work.wait();  // rethrows a failure; returns at once otherwise
}

void parkOrphan(WorkPtr work, std::vector<nb::ndarray<>> arrays, nb::object owner) {
  orphans->push_back({std::move(work), std::move(arrays), std::move(owner)});
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
