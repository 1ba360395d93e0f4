// Maps the core's exception hierarchy (horovod/errors.h) to Python:
//   InvalidArgument -> ValueError
//   PeerLost        -> horovod.common.exceptions.HorovodPeerLostError (has .rank)
//   RemovedFromJob  -> horovod.common.exceptions.HorovodRemovedError
//   any other Error -> horovod.common.exceptions.HorovodInternalError (a RuntimeError)
// The Python classes are looked up lazily (the exceptions module must not import the extension).
#pragma once

#include <nanobind/nanobind.h>

namespace hvd::py {

void registerErrorTranslator();

}  // namespace hvd::py
