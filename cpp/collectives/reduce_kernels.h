// Byte-range reduce callbacks for the algorithms: resolved once per collective from (dtype, op),
// then applied to ranges of elements. Operand order is explicit because Min/Max with signed zeros
// or NaN payloads are not symmetric: algorithms always combine (lower-rank part OP higher-rank
// part) so that every rank computes the same bits. Which payload a NaN sum or product carries
// may depend on the compiled loop (compilers swap commutative operands), so where two ranks
// compute the same element they call the same function (to) with the same operand roles.
#pragma once

#include <cstddef>

#include "horovod/types.h"

namespace hvd {

struct ReduceKernel {
  // dst = a OP b; dst may alias a or b exactly (not partially).
  void (*to)(void* dst, const void* a, const void* b, size_t count) = nullptr;
  // dst = dst OP src (dst is the left operand); no overlap.
  void (*into)(void* dst, const void* src, size_t count) = nullptr;
  // dst = src OP dst (src is the left operand); no overlap.
  void (*intoLeft)(void* dst, const void* src, size_t count) = nullptr;
  size_t elementSize = 0;
};

// Throws InvalidArgument for ops other than Sum/Min/Max/Product. The reference stays valid for
// the life of the process.
const ReduceKernel& reduceKernel(DataType dtype, ReduceOp op);
// The same kernels without CPU-specific paths (for tests: both give the same bits, NaN payloads aside).
const ReduceKernel& portableReduceKernel(DataType dtype, ReduceOp op);

}  // namespace hvd
