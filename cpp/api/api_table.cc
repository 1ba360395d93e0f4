#include "horovod/api_table.h"

#include "horovod/horovod.h"

namespace hvd {

const ApiTable& apiTable() {
  static const ApiTable table = [] {
    ApiTable t;
    t.rank = &rank;
    t.size_ = &size;
    t.localRank = &localRank;
    t.localSize = &localSize;
    t.processSetRanks = &processSetRanks;
    t.allreduceAsync = &allreduceAsync;
    t.groupedAllreduceAsync = &groupedAllreduceAsync;
    t.allgatherAsync = &allgatherAsync;
    t.groupedAllgatherAsync = &groupedAllgatherAsync;
    t.broadcastAsync = &broadcastAsync;
    t.alltoallAsync = &alltoallAsync;
    t.reducescatterAsync = &reducescatterAsync;
    t.groupedReducescatterAsync = &groupedReducescatterAsync;
    t.joinAsync = [] { return joinAsync(); };
    return t;
  }();
  return table;
}

}  // namespace hvd
