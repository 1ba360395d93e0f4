// alltoallv: pairwise exchange. At step s rank r sends its block for (r+s)%n and receives the
// block from (r-s)%n, so every step pairs each rank with one sender and one receiver.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/partition.h"

namespace hvd::collectives {

void alltoallv(Communicator& comm, const void* in, const std::vector<size_t>& sendBytes, void* out,
               const std::vector<size_t>& recvBytes) {
  const int n = comm.size(), r = comm.rank();
  HVD_CHECK_AS(InvalidArgument, static_cast<int>(sendBytes.size()) == n && static_cast<int>(recvBytes.size()) == n)
      << "alltoallv: " << sendBytes.size() << " send sizes and " << recvBytes.size() << " receive sizes for " << n
      << " ranks";
  std::vector<size_t> sendOffsets(n, 0), recvOffsets(n, 0);
  for (int j = 1; j < n; ++j) {
    sendOffsets[j] = sendOffsets[j - 1] + sendBytes[j - 1];
    recvOffsets[j] = recvOffsets[j - 1] + recvBytes[j - 1];
  }
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  HVD_CHECK_AS(InvalidArgument, sendBytes[r] == recvBytes[r])
      << "alltoallv: rank " << r << " sends itself " << sendBytes[r] << " bytes but expects " << recvBytes[r];
  if (sendBytes[r] > 0) std::memmove(dst + recvOffsets[r], src + sendOffsets[r], sendBytes[r]);
  if (n == 1) return;
  for (int s = 1; s < n; ++s) {
    int to = mod(r + s, n), from = mod(r - s, n);
    comm.sendRecv(to, src + sendOffsets[to], sendBytes[to], from, dst + recvOffsets[from], recvBytes[from],
                  comm.deadline());
  }
}

}  // namespace hvd::collectives
