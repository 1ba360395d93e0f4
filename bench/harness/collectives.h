// One descriptor per collective: how a nominal row size becomes element counts, how inputs are
// filled, how the operation is run and how its output is checked. The harness (harness.cc)
// owns the buffers and the timing; a descriptor only knows its collective.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "harness/bench_comm.h"

namespace hvd::bench {

// A page-aligned heap buffer (not zeroed; descriptors fill what they use).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  // Adopts memory a system allocated (BenchComm::allocateShared).
  Buffer(std::shared_ptr<void> memory, size_t bytes) : data_(std::move(memory)), bytes_(bytes), adopted_(true) {}
  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }
  bool adopted() const { return adopted_; }

 private:
  std::shared_ptr<void> data_;
  size_t bytes_ = 0;
  bool adopted_ = false;
};

// Everything one row needs; the harness allocates `in` and `out` with the sizes the
// descriptor's shape() asked for.
struct RowContext {
  BenchComm* comm = nullptr;
  ElemType type = ElemType::kFloat32;
  int rank = 0;
  int ranks = 1;
  int root = 0;
  size_t count = 0;           // the count argument of the run call
  std::vector<Buffer> in;     // one per tensor (allreduce_batch: k)
  std::vector<Buffer> out;
  const void* result = nullptr;  // where run() left the output to check
};

struct RowShape {
  size_t count = 0;        // 0: this size is too small for the operation; skip the row
  size_t inElems = 0;      // per buffer
  size_t outElems = 0;     // per buffer
  size_t buffers = 1;
  size_t reportedBytes = 0;
};

struct Collective {
  std::string_view name;
  std::string_view redop;  // the row's redop column: "sum", "avg" or "none"
  double (*busFactor)(int ranks);
  RowShape (*shape)(size_t bytes, size_t elemBytes, int ranks, int batch);
  void (*fill)(RowContext& row);
  void (*run)(RowContext& row);
  // Number of wrong elements on this rank.
  size_t (*check)(const RowContext& row);
};

// nullptr for an unknown name.
const Collective* findCollective(std::string_view name);
const std::vector<Collective>& allCollectives();

}  // namespace hvd::bench
