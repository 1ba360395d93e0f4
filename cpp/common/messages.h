// User-facing messages that several layers raise word for word (engine, C++ API, transports,
// Python binding). Each is Horovod's text, which user code and tests match on: write it only here.
#pragma once

namespace hvd {

// Raised by operations before init() or after shutdown (topology getters raise it as
// InvalidArgument).
inline constexpr char kNotInitializedMessage[] = "Horovod has not been initialized; use hvd.init().";

// Raised (as Aborted) by operations on an engine that was shut down or aborted.
inline constexpr char kShutdownMessage[] =
    "Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to "
    "allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the shutdown was "
    "caused by an exception, you should see the exception in the log before the first shutdown message.";

}  // namespace hvd
