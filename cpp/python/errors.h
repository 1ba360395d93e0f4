// Maps the core's exception hierarchy (horovod/errors.h) to Python:
//   InvalidArgument -> ValueError
//   PeerLost        -> horovod.common.exceptions.HorovodPeerLostError (has .rank)
//   RemovedFromJob  -> horovod.common.exceptions.HorovodRemovedError
//   any other Error -> horovod.common.exceptions.HorovodInternalError (a RuntimeError)
// Each raised Horovod exception carries the core's ErrorCode as `.code` (an int equal to a
// horovod.common.exceptions.ErrorCode); ValueError carries none.
// The Python classes are looked up lazily (the exceptions module must not import the extension).
#pragma once

#include <nanobind/nanobind.h>

namespace hvd::py {

void registerErrorTranslator();

}  // namespace hvd::py
