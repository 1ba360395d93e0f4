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
  // dst = (a OP b) scaled by `factor` as scaleBuffer() scales (1 = not at all), and the same
  // values written to `copy`, in one pass: for an algorithm that keeps a result where its peers
  // read it and also delivers it to an output (a second pass over the result would cost a read
  // and a write per element and stall the stream of inputs). Streaming stores into `copy` when
  // `stream`; the caller fences (streamFence()) before publishing. dst and copy may each alias
  // a or b exactly; they must not overlap each other. Throws scaleBuffer's error for a factor
  // the type cannot take.
  void (*toAndCopy)(void* dst, void* copy, const void* a, const void* b, size_t count, double factor,
                    bool stream) = nullptr;
  size_t elementSize = 0;
};

// Throws InvalidArgument for ops other than Sum/Min/Max/Product. The reference stays valid for
// the life of the process.
const ReduceKernel& reduceKernel(DataType dtype, ReduceOp op);
// The same kernels without CPU-specific paths (for tests: both give the same bits, NaN payloads aside).
const ReduceKernel& portableReduceKernel(DataType dtype, ReduceOp op);

}  // namespace hvd
