// Fused layout: how the tensors of one agreed response lie in the fusion buffer, and the copies
// in and out of it. Shared by the collective backends (backends/: cpu, mpi) so that every
// data plane packs a response the same way.
//
//   allreduce      tensors back to back
//   allgather      rank 0's rows of every tensor, then rank 1's, ...
//   reducescatter  rank 0's block of every tensor, then rank 1's, ...; a rank's result block
//                  holds its block of every tensor, in tensor order
//
// `entries[i]` is null where this rank has no entry for tensor i (it joined): it contributes
// zeros to a reduction and no rows to an allgather, and receives nothing.
//
// Each layout is also given as a copy plan (the forEach* visitors below), which the host copies
// here and a device backend's asynchronous copies (backends/cuda) both follow, so the layout is
// written once: fn(size_t bufOffset, size_t tensor, size_t tensorOffset, size_t bytes) is called
// for every piece in buffer order, zero-byte pieces included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/message.h"
#include "engine/output_pool.h"
#include "engine/tensor_queue.h"

namespace hvd::engine {

size_t tensorBytes(const TensorInfo& t, DataType dtype);

// Allreduce: the bytes of every tensor of `r`, and the copies in (inputs, zeros for missing
// entries) and out (to the entries' outputs).
size_t fusedBytes(const Response& r);
void packTensors(const Response& r, const std::vector<Entry*>& entries, uint8_t* buf);
// Its plan: tensor i whole (tensorOffset 0) at its place in the buffer.
template <class Fn>
void forEachFusedTensor(const Response& r, Fn&& fn) {
  size_t offset = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const size_t bytes = tensorBytes(r.tensors[i], r.params.dtype);
    fn(offset, i, size_t{0}, bytes);
    offset += bytes;
  }
}
void unpackTensors(const Response& r, const std::vector<Entry*>& entries, const uint8_t* buf);

// Allgather over `ranks` set members.
struct AllgatherLayout {
  AllgatherLayout(const Response& r, int ranks);
  std::vector<size_t> rowBytes;      // per tensor: bytes of one row (dims >= 1)
  std::vector<size_t> bytesPerRank;  // per rank: its rows of every tensor
  std::vector<size_t> rankOffset;    // per rank: where its rows start in the fused buffer
  size_t total = 0;
};
// The outputs ([sum of first dims, rest...]) of the entries this rank has, from `pool`
// (`shared`: OutputPool's shared blocks); null for tensors without an entry.
std::vector<OwnedTensor*> allocateAllgatherOutputs(const Response& r, const std::vector<Entry*>& entries,
                                                   OutputPool& pool, bool shared);
// The same with `allocate(entry, dtype, shape)` making each entry's output (a device backend's
// memory).
std::vector<OwnedTensor*> allocateAllgatherOutputs(
    const Response& r, const std::vector<Entry*>& entries,
    const std::function<OwnedTensor(const Entry&, DataType, std::vector<int64_t>)>& allocate);
// Copies this rank's (`me`) rows of every tensor to their place in `buf`.
void packAllgather(const AllgatherLayout& layout, const Response& r, int me, const std::vector<Entry*>& entries,
                   uint8_t* buf);
// Copies every rank's rows from `buf` to the outputs.
void unpackAllgather(const AllgatherLayout& layout, const Response& r, const std::vector<OwnedTensor*>& outputs,
                     const uint8_t* buf);
// Its plans. Rank `p`'s own rows: tensor i's at bufOffset, from offset 0 of p's input.
template <class Fn>
void forEachAllgatherInput(const AllgatherLayout& layout, const Response& r, int p, Fn&& fn) {
  size_t offset = layout.rankOffset[static_cast<size_t>(p)];
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const size_t bytes = static_cast<size_t>(r.tensors[i].data().firstDims[p]) * layout.rowBytes[i];
    fn(offset, i, size_t{0}, bytes);
    offset += bytes;
  }
}
// Every rank's rows, rank after rank: tensor i's rows from a rank lie at bufOffset, and at
// tensorOffset in tensor i's output.
template <class Fn>
void forEachAllgatherOutput(const AllgatherLayout& layout, const Response& r, Fn&& fn) {
  std::vector<size_t> outOffset(r.tensors.size(), 0);
  size_t offset = 0;
  for (size_t p = 0; p < layout.rankOffset.size(); ++p) {
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const size_t bytes = static_cast<size_t>(r.tensors[i].data().firstDims[p]) * layout.rowBytes[i];
      fn(offset, i, outOffset[i], bytes);
      outOffset[i] += bytes;
      offset += bytes;
    }
  }
}

// Rows of dim 0 that set rank `r` of `n` gets in a reducescatter of `rows` rows
// (the first rows % n ranks get one row more, as in Horovod).
inline int64_t reducescatterRows(int64_t rows, int n, int r) { return rows / n + (r < rows % n ? 1 : 0); }

// Reducescatter over `ranks` set members: elements per rank over every tensor, and the copies
// into the fused buffer (every rank's block of every tensor) and out of this rank's result.
std::vector<size_t> reducescatterCounts(const Response& r, int ranks);
void packReducescatter(const Response& r, int ranks, const std::vector<Entry*>& entries, uint8_t* buf);
void unpackReducescatter(const Response& r, int ranks, int me, const std::vector<Entry*>& entries,
                         const uint8_t* result);
// The plan of the fused input: set rank p's block of tensor i (from tensorOffset in its input),
// for p = 0.., i = 0.. .
template <class Fn>
void forEachReducescatterPiece(const Response& r, int ranks, Fn&& fn) {
  const size_t esize = dataTypeSize(r.params.dtype);
  size_t offset = 0;
  for (int p = 0; p < ranks; ++p) {
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const TensorInfo& t = r.tensors[i].data();
      const size_t rowBytes = static_cast<size_t>(t.rowElements()) * esize;
      int64_t firstRow = 0;
      for (int q = 0; q < p; ++q) firstRow += reducescatterRows(t.shape[0], ranks, q);
      const size_t bytes = static_cast<size_t>(reducescatterRows(t.shape[0], ranks, p)) * rowBytes;
      fn(offset, i, static_cast<size_t>(firstRow) * rowBytes, bytes);
      offset += bytes;
    }
  }
}
// The plan of rank `me`'s result block: tensor i's output (whole) at its place in the block.
template <class Fn>
void forEachReducescatterResult(const Response& r, int ranks, int me, Fn&& fn) {
  const size_t esize = dataTypeSize(r.params.dtype);
  size_t offset = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorInfo& t = r.tensors[i].data();
    const size_t bytes = static_cast<size_t>(reducescatterRows(t.shape[0], ranks, me) * t.rowElements()) * esize;
    fn(offset, i, size_t{0}, bytes);
    offset += bytes;
  }
}

}  // namespace hvd::engine
