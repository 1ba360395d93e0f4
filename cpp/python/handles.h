// HandleSpace: one framework adapter's integer handles (what allreduce_async() & co. return in
// Horovod's API), each mapped to a pending operation, the Python object synchronize() hands back,
// and the arrays the operation reads and writes.
//
// Every adapter owns its own space (horovod.torch one, horovod.tensorflow another, ...): handle
// counters, completion and reset are per space, so one adapter's reset (hvd.init, hvd.shutdown)
// never drops another adapter's pending operations.
//
// Kept in C++ so that the per-tensor path of a training loop is one binding call to enqueue
// (HandleSpace.allreduce: DLPack view, name, enqueue, register) and one to complete
// (synchronize), with no Python-level Work object, tuple or dict in between.
//
// Everything here runs with the GIL held (which is what makes a space and its handle counter safe
// from any Python thread); synchronize() releases it only while the operation is still running.
#pragma once

#include <nanobind/nanobind.h>

namespace hvd::py {

namespace nb = nanobind;

void bindHandles(nb::module_& m);

}  // namespace hvd::py
