#include "engine/fused_layout.h"

#include <cstring>

#include "engine/work.h"

namespace hvd::engine {

size_t tensorBytes(const TensorInfo& t, DataType dtype) {
  return static_cast<size_t>(t.numElements()) * dataTypeSize(dtype);
}

size_t fusedBytes(const Response& r) {
  size_t total = 0;
  for (const auto& t : r.tensors) total += tensorBytes(t, r.params.dtype);
  return total;
}

void packTensors(const Response& r, const std::vector<Entry*>& entries, uint8_t* buf) {
  forEachFusedTensor(r, [&](size_t offset, size_t i, size_t, size_t bytes) {
    if (entries[i] != nullptr) {
      if (bytes > 0) std::memcpy(buf + offset, entries[i]->input, bytes);
    } else {
      std::memset(buf + offset, 0, bytes);
    }
  });
}

void unpackTensors(const Response& r, const std::vector<Entry*>& entries, const uint8_t* buf) {
  forEachFusedTensor(r, [&](size_t offset, size_t i, size_t, size_t bytes) {
    if (entries[i] != nullptr && bytes > 0) std::memcpy(entries[i]->output, buf + offset, bytes);
  });
}

AllgatherLayout::AllgatherLayout(const Response& r, int ranks)
    : rowBytes(r.tensors.size()), bytesPerRank(static_cast<size_t>(ranks), 0), rankOffset(static_cast<size_t>(ranks)) {
  const size_t esize = dataTypeSize(r.params.dtype);
  for (size_t i = 0; i < r.tensors.size(); ++i) rowBytes[i] = static_cast<size_t>(r.tensors[i].rowElements()) * esize;
  for (int p = 0; p < ranks; ++p) {
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      bytesPerRank[p] += static_cast<size_t>(r.tensors[i].data().firstDims[p]) * rowBytes[i];
    }
    rankOffset[p] = total;
    total += bytesPerRank[p];
  }
}

std::vector<OwnedTensor*> allocateAllgatherOutputs(const Response& r, const std::vector<Entry*>& entries,
                                                   OutputPool& pool, bool shared) {
  return allocateAllgatherOutputs(r, entries, [&](const Entry&, DataType dtype, std::vector<int64_t> shape) {
    return allocateTensor(pool, dtype, std::move(shape), shared);
  });
}

std::vector<OwnedTensor*> allocateAllgatherOutputs(
    const Response& r, const std::vector<Entry*>& entries,
    const std::function<OwnedTensor(const Entry&, DataType, std::vector<int64_t>)>& allocate) {
  std::vector<OwnedTensor*> outputs(r.tensors.size(), nullptr);
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    Entry* e = entries[i];
    if (e == nullptr) continue;
    const TensorInfo& t = r.tensors[i].data();
    std::vector<int64_t> shape = t.shape;
    int64_t rows = 0;
    for (auto d : t.firstDims) rows += d;
    shape[0] = rows;
    OwnedTensor& out = e->work->output(e->member);
    out = allocate(*e, r.params.dtype, std::move(shape));
    outputs[i] = &out;
  }
  return outputs;
}

void packAllgather(const AllgatherLayout& layout, const Response& r, int me, const std::vector<Entry*>& entries,
                   uint8_t* buf) {
  forEachAllgatherInput(layout, r, me, [&](size_t offset, size_t i, size_t, size_t bytes) {
    if (entries[i] != nullptr && bytes > 0) std::memcpy(buf + offset, entries[i]->input, bytes);
  });
}

void unpackAllgather(const AllgatherLayout& layout, const Response& r, const std::vector<OwnedTensor*>& outputs,
                     const uint8_t* buf) {
  forEachAllgatherOutput(layout, r, [&](size_t offset, size_t i, size_t outOffset, size_t bytes) {
    if (outputs[i] != nullptr && bytes > 0) {
      std::memcpy(static_cast<uint8_t*>(outputs[i]->view.data) + outOffset, buf + offset, bytes);
    }
  });
}

std::vector<size_t> reducescatterCounts(const Response& r, int ranks) {
  std::vector<size_t> counts(static_cast<size_t>(ranks), 0);
  for (int p = 0; p < ranks; ++p) {
    for (const auto& t : r.tensors) {
      counts[p] += static_cast<size_t>(reducescatterRows(t.data().shape[0], ranks, p) * t.rowElements());
    }
  }
  return counts;
}

void packReducescatter(const Response& r, int ranks, const std::vector<Entry*>& entries, uint8_t* buf) {
  forEachReducescatterPiece(r, ranks, [&](size_t offset, size_t i, size_t inputOffset, size_t bytes) {
    if (entries[i] != nullptr) {
      if (bytes > 0) std::memcpy(buf + offset, static_cast<const uint8_t*>(entries[i]->input) + inputOffset, bytes);
    } else {
      std::memset(buf + offset, 0, bytes);
    }
  });
}

void unpackReducescatter(const Response& r, int ranks, int me, const std::vector<Entry*>& entries,
                         const uint8_t* result) {
  forEachReducescatterResult(r, ranks, me, [&](size_t offset, size_t i, size_t, size_t bytes) {
    if (entries[i] != nullptr && bytes > 0) std::memcpy(entries[i]->output, result + offset, bytes);
  });
}

}  // namespace hvd::engine
