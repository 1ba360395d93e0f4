// Point-to-point allreduce algorithms: recursive doubling and ring. Both leave identical bits on
// every rank: each output element is either computed once and copied (ring), or computed by
// partners that combine the same two operands in the same order (recursive doubling).
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/partition.h"

namespace hvd::collectives {

// Recursive doubling over p = 2^k "virtual" ranks. With n = p + rem, ranks 0..2*rem-1 first fold
// in pairs (2i sends to 2i+1, which keeps x_2i OP x_2i+1); the odd ones and ranks >= 2*rem then
// form the p virtual ranks, in the same order as the real ranks. At each level partners swap
// buffers and compute (lower half-group OP upper half-group), so after level k every group of
// 2^k virtual ranks holds identical data. Finally odd ranks hand the result back to 2i.
void allreduceRecursiveDoubling(const AllreduceArgs& args) {
  Communicator& comm = args.comm;
  const int n = comm.size(), r = comm.rank();
  const size_t bytes = args.count * args.kernel.elementSize;
  auto* buf = static_cast<uint8_t*>(args.buf);
  auto* tmp = static_cast<uint8_t*>(comm.scratch(0, bytes));
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;

  int vrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      comm.send(r + 1, buf, bytes, comm.deadline());
      vrank = -1;
    } else {
      comm.recv(r - 1, tmp, bytes, comm.deadline());
      args.kernel.intoLeft(buf, tmp, args.count);  // x_{r-1} OP x_r
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }

  if (vrank >= 0) {
    // Both partners call the very same kernel, to(out, lower, higher) into a buffer distinct
    // from both inputs, so even compiler-chosen operand orders (NaN payloads) agree.
    uint8_t* cur = buf;
    auto* spare = static_cast<uint8_t*>(comm.scratch(1, bytes));
    for (int mask = 1; mask < p; mask <<= 1) {
      int vpeer = vrank ^ mask;
      int peer = vpeer < rem ? 2 * vpeer + 1 : vpeer + rem;
      comm.sendRecv(peer, cur, bytes, peer, tmp, bytes, comm.deadline());
      uint8_t* out = cur == buf ? spare : buf;
      if (vpeer < vrank) {
        args.kernel.to(out, tmp, cur, args.count);  // theirs (lower) OP mine
      } else {
        args.kernel.to(out, cur, tmp, args.count);  // mine (lower) OP theirs
      }
      cur = out;
    }
    if (cur != buf) std::memcpy(buf, cur, bytes);
  }

  if (r < 2 * rem) {
    if (r % 2 == 1) {
      comm.send(r - 1, buf, bytes, comm.deadline());
    } else {
      comm.recv(r + 1, buf, bytes, comm.deadline());
    }
  }
}

// Ring: the buffer is processed in chunks of n segments (each step's message <= kSegmentBytes).
// Per chunk, n-1 reduce-scatter steps (block b travels b, b+1, ..., b-1, accumulating as
// (received OP own)), after which rank r owns finished block r+1, then n-1 allgather steps.
void allreduceRing(const AllreduceArgs& args) {
  Communicator& comm = args.comm;
  const int n = comm.size(), r = comm.rank();
  const size_t elem = args.kernel.elementSize;
  const size_t segElems = std::max<size_t>(1, kSegmentBytes / elem);
  const size_t chunkElems = segElems * n;
  auto* buf = static_cast<uint8_t*>(args.buf);
  auto* tmp = static_cast<uint8_t*>(comm.scratch(0, std::min(args.count, segElems) * elem));
  const int right = mod(r + 1, n), left = mod(r - 1, n);

  for (size_t offset = 0; offset < args.count; offset += chunkElems) {
    const size_t c = std::min(chunkElems, args.count - offset);
    uint8_t* base = buf + offset * elem;
    for (int s = 0; s < n - 1; ++s) {
      Block out = evenBlock(c, n, mod(r - s, n));
      Block in = evenBlock(c, n, mod(r - s - 1, n));
      comm.sendRecv(right, base + out.begin * elem, out.size * elem, left, tmp, in.size * elem, comm.deadline());
      args.kernel.intoLeft(base + in.begin * elem, tmp, in.size);
    }
    for (int s = 0; s < n - 1; ++s) {
      Block out = evenBlock(c, n, mod(r + 1 - s, n));
      Block in = evenBlock(c, n, mod(r - s, n));
      comm.sendRecv(right, base + out.begin * elem, out.size * elem, left, base + in.begin * elem, in.size * elem,
                    comm.deadline());
    }
  }
}

}  // namespace hvd::collectives
