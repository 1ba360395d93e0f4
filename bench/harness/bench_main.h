// The main() shared by the collective benchmarks: parses the flags, records resident memory
// before the system initialises and after the run, runs the harness and sets the exit status
// (0 all rows OK, 1 a row was WRONG, 2 bad command line).
#pragma once

#include <functional>
#include <memory>

#include "harness/bench_comm.h"

namespace hvd::bench {

// `makeComm` initialises the system (hvd::init, MPI_Init, ...) and returns its BenchComm; the
// BenchComm's destructor shuts the system down.
int benchMain(int argc, char** argv, const std::function<std::unique_ptr<BenchComm>()>& makeComm);

}  // namespace hvd::bench
