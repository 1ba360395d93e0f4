// The handle table of the framework adapters (horovod.torch): the integer handles that
// allreduce_async() & co. return, mapped to the pending operation, the Python object that
// synchronize() hands back, and the arrays the operation reads and writes.
//
// Kept in C++ so that the per-tensor path of a training loop is one binding call to enqueue
// (allreduce_h: DLPack view, name, enqueue, register) and one to complete (synchronize), with no
// Python-level Work object, tuple or dict in between.
//
// Everything here runs with the GIL held (which is what makes the table and the handle counter
// safe from any Python thread); synchronize() releases it only while the operation is still
// running. The table is cleared by reset_handles() (hvd.init and hvd.shutdown), which also
// restarts the handle counter.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "engine/runtime.h"

namespace hvd::py {

namespace nb = nanobind;

// Called by the module's init()/shutdown() (GIL held): the runtime the fast enqueue path talks
// to without going through the default-runtime lock on every call. Cleared before the runtime
// is shut down (and from Python's atexit, before the C++ exit handlers tear the runtime down).
void setCachedRuntime(std::shared_ptr<engine::Runtime> runtime);

// Defined in module.cc: throws the binding's error for a collective outside init..shutdown and
// releases the arrays of dropped, completed operations.
void requireRunning();

void bindHandles(nb::module_& m);

}  // namespace hvd::py
