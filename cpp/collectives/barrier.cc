// barrier: the SharedSpace barrier when the members share memory, else dissemination
// (ceil(log2 n) rounds; in round k rank r signals r+2^k and waits for r-2^k).
#include "collectives/collectives.h"
#include "collectives/partition.h"

namespace hvd::collectives {

void barrier(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1) return;
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  if (shared != nullptr) {
    shared->barrier(comm.deadline());
    return;
  }
  uint8_t token = 1, received = 0;
  for (int k = 1; k < n; k <<= 1) {
    comm.sendRecv(mod(r + k, n), &token, 1, mod(r - k, n), &received, 1, comm.deadline());
  }
}

}  // namespace hvd::collectives
