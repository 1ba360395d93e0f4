// ApiTable: the public API's entry points as one table of function pointers.
//
// For a library loaded into a process whose Horovod core lives in another module (the
// TensorFlow kernel library, loaded by TensorFlow while the core is part of horovod._core): it
// must drive that module's engine, not link a second copy of the core. The module holding the
// core hands out the address of its table (hvd::apiTable()); the library checks `version` and
// `size` before using any entry. Both sides must be built from the same sources with the same
// compiler (the entries use C++ types); the version changes whenever an entry changes, or a type
// that crosses the table does (exceptions included: the library reads Error::code()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "horovod/operation.h"

namespace hvd {

struct ApiTable {
  // 2: Work::whenComplete; 3: Error::code(); 4: Error::relayedFrom(), PeerLost::peerAborted() (errors.h)
  static constexpr uint32_t kVersion = 4;
  uint32_t version = kVersion;
  uint32_t size = sizeof(ApiTable);

  int (*rank)();
  int (*size_)();
  int (*localRank)();
  int (*localSize)();
  std::vector<int> (*processSetRanks)(int processSetId);

  WorkPtr (*allreduceAsync)(const TensorView& in, const TensorView& out, const Options& options);
  WorkPtr (*groupedAllreduceAsync)(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                                   const Options& options);
  WorkPtr (*allgatherAsync)(const TensorView& in, const Options& options);
  WorkPtr (*groupedAllgatherAsync)(const std::vector<TensorView>& in, const Options& options);
  WorkPtr (*broadcastAsync)(const TensorView& tensor, const Options& options);
  WorkPtr (*alltoallAsync)(const TensorView& in, const Options& options);
  WorkPtr (*reducescatterAsync)(const TensorView& in, const TensorView& out, const Options& options);
  WorkPtr (*groupedReducescatterAsync)(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                                       const Options& options);
  WorkPtr (*joinAsync)();
};

// This module's table (static storage; valid for the life of the process).
const ApiTable& apiTable();

}  // namespace hvd
