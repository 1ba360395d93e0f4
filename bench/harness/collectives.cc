// The collective descriptors. Patterns are small integers >= 1 (see data.h), so a zeroed output
// buffer never passes a check by accident.
#include "harness/collectives.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace hvd::bench {

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  // Page alignment: every system gets the same alignment, and nobody profits from a lucky one.
  // A mapping of its own, not malloc: a row's buffers leave the resident set when the row ends,
  // so the memory report measures the system's memory, not the harness's.
  const size_t length = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_.reset(p, [length](void* q) { munmap(q, length); });
}

namespace {

int64_t triangle(int ranks) { return static_cast<int64_t>(ranks) * (ranks + 1) / 2; }

void zero(Buffer& b) { std::memset(b.data(), 0, b.bytes()); }

// ---- allreduce: in[i] = (rank+1)(i%5+1); out[i] = n(n+1)/2 (i%5+1) --------------------------

RowShape allreduceShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s;
  s.count = bytes / elem;
  s.inElems = s.outElems = s.count;
  s.reportedBytes = s.count * elem;
  return s;
}
void allreduceFill(RowContext& row) {
  int r = row.rank;
  fillElements(row.in[0].data(), row.type, row.count, [r](size_t i) { return (r + 1) * int(i % 5 + 1); });
  zero(row.out[0]);
}
void allreduceRun(RowContext& row) {
  row.comm->allreduce(row.in[0].data(), row.out[0].data(), row.count, row.type);
  row.result = row.out[0].data();
}
size_t allreduceCheck(const RowContext& row) {
  int64_t t = triangle(row.ranks);
  return countMismatches(row.result, row.type, row.count, [t](size_t i) { return t * int64_t(i % 5 + 1); });
}

// ---- allreduce_batch: k tensors of `count` elements, tensor j shifted by j ------------------

RowShape batchShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s = allreduceShape(bytes, elem, ranks, batch);
  s.buffers = static_cast<size_t>(batch);
  s.reportedBytes *= s.buffers;
  return s;
}
void batchFill(RowContext& row) {
  int r = row.rank;
  for (size_t j = 0; j < row.in.size(); ++j) {
    fillElements(row.in[j].data(), row.type, row.count, [r, j](size_t i) { return (r + 1) * int((i + j) % 5 + 1); });
    zero(row.out[j]);
  }
}
void batchRun(RowContext& row) {
  std::vector<const void*> in;
  std::vector<void*> out;
  for (size_t j = 0; j < row.in.size(); ++j) {
    in.push_back(row.in[j].data());
    out.push_back(row.out[j].data());
  }
  row.comm->allreduceBatch(in, out, row.count, row.type);
  row.result = row.out[0].data();
}
size_t batchCheck(const RowContext& row) {
  int64_t t = triangle(row.ranks);
  size_t bad = 0;
  for (size_t j = 0; j < row.out.size(); ++j)
    bad += countMismatches(row.out[j].data(), row.type, row.count,
                           [t, j](size_t i) { return t * int64_t((i + j) % 5 + 1); });
  return bad;
}

// ---- allgather: in[i] = (7 rank + i) % 61 + 1; out = blocks in rank order --------------------

RowShape gatherShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s;
  s.count = bytes / elem / static_cast<size_t>(ranks);
  s.inElems = s.count;
  s.outElems = s.count * ranks;
  s.reportedBytes = s.outElems * elem;
  return s;
}
int gatherValue(int r, size_t i) { return int((size_t(r) * 7 + i) % 61) + 1; }
void allgatherFill(RowContext& row) {
  int r = row.rank;
  fillElements(row.in[0].data(), row.type, row.count, [r](size_t i) { return gatherValue(r, i); });
  zero(row.out[0]);
}
void allgatherRun(RowContext& row) {
  row.result = row.comm->allgather(row.in[0].data(), row.count, row.type, row.out[0].data());
}
size_t allgatherCheck(const RowContext& row) {
  size_t c = row.count;
  return countMismatches(row.result, row.type, c * row.ranks, [c](size_t i) { return gatherValue(int(i / c), i % c); });
}

// ---- broadcast: root holds (3i + root) % 83 + 1, the others zeros ---------------------------

int bcastValue(int root, size_t i) { return int((i * 3 + size_t(root)) % 83) + 1; }
void broadcastFill(RowContext& row) {
  int root = row.root;
  if (row.rank == root)
    fillElements(row.in[0].data(), row.type, row.count, [root](size_t i) { return bcastValue(root, i); });
  else zero(row.in[0]);
}
void broadcastRun(RowContext& row) {
  row.comm->broadcast(row.in[0].data(), row.count, row.type, row.root);
  row.result = row.in[0].data();
}
size_t broadcastCheck(const RowContext& row) {
  int root = row.root;
  return countMismatches(row.result, row.type, row.count, [root](size_t i) { return bcastValue(root, i); });
}
RowShape broadcastShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s = allreduceShape(bytes, elem, ranks, batch);
  s.outElems = 0;
  return s;
}

// ---- alltoall: block j of rank r's input, element i = (13r + 3j + i) % 59 + 1 ----------------

int a2aValue(int src, int dst, size_t i) { return int((size_t(src) * 13 + size_t(dst) * 3 + i) % 59) + 1; }
RowShape alltoallShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s;
  s.count = bytes / elem / static_cast<size_t>(ranks);
  s.inElems = s.outElems = s.count * ranks;
  s.reportedBytes = s.inElems * elem;
  return s;
}
void alltoallFill(RowContext& row) {
  int r = row.rank;
  size_t c = row.count;
  fillElements(row.in[0].data(), row.type, c * row.ranks, [r, c](size_t i) { return a2aValue(r, int(i / c), i % c); });
  zero(row.out[0]);
}
void alltoallRun(RowContext& row) {
  row.result = row.comm->alltoall(row.in[0].data(), row.count, row.type, row.out[0].data());
}
size_t alltoallCheck(const RowContext& row) {
  int r = row.rank;
  size_t c = row.count;
  return countMismatches(row.result, row.type, c * row.ranks,
                         [r, c](size_t i) { return a2aValue(int(i / c), r, i % c); });
}

// ---- reducescatter: allreduce's pattern over n blocks; rank r keeps block r -----------------

RowShape reducescatterShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s;
  s.count = bytes / elem / static_cast<size_t>(ranks);
  s.inElems = s.count * ranks;
  s.outElems = s.count;
  s.reportedBytes = s.inElems * elem;
  return s;
}
void reducescatterFill(RowContext& row) {
  int r = row.rank;
  fillElements(row.in[0].data(), row.type, row.count * row.ranks, [r](size_t i) { return (r + 1) * int(i % 5 + 1); });
  zero(row.out[0]);
}
void reducescatterRun(RowContext& row) {
  row.comm->reducescatter(row.in[0].data(), row.out[0].data(), row.count, row.type);
  row.result = row.out[0].data();
}
size_t reducescatterCheck(const RowContext& row) {
  int64_t t = triangle(row.ranks);
  size_t base = row.count * static_cast<size_t>(row.rank);
  return countMismatches(row.result, row.type, row.count,
                         [t, base](size_t i) { return t * int64_t((base + i) % 5 + 1); });
}

// ---- allreduce_average: Average in place in the harness's own (private) memory, what
// hvd.allreduce(t) does by default for ordinary tensors (the staged path); allreduce_shared below
// is the same in memory the system provides. in[i] = 2(rank+1)(i%5+1); the average over n ranks
// is (n+1)(i%5+1), exact, and a fixed point.

void averageFill(RowContext& row) {
  int r = row.rank;
  fillElements(row.in[0].data(), row.type, row.count, [r](size_t i) { return 2 * (r + 1) * int(i % 5 + 1); });
}

// ---- allreduce_shared: the same in system-allocated memory (the gradient path) -------------

// Replaces `buffer` (once per row) by `count` elements of memory from the system under test,
// when it offers any (BenchComm::allocateShared); otherwise the harness's buffer stays.
void adoptShared(RowContext& row, Buffer& buffer) {
  const size_t bytes = row.count * elemSize(row.type);
  if (buffer.adopted()) return;
  if (auto memory = row.comm->allocateShared(bytes)) buffer = Buffer(std::move(memory), bytes);
}

void sharedFill(RowContext& row) {
  adoptShared(row, row.in[0]);
  averageFill(row);
}
void sharedRun(RowContext& row) {
  row.comm->allreduceAverageInPlace(row.in[0].data(), row.count, row.type);
  row.result = row.in[0].data();
}
size_t sharedCheck(const RowContext& row) {
  int64_t m = row.ranks + 1;
  return countMismatches(row.result, row.type, row.count, [m](size_t i) { return m * int64_t(i % 5 + 1); });
}
RowShape sharedShape(size_t bytes, size_t elem, int ranks, int batch) {
  RowShape s = allreduceShape(bytes, elem, ranks, batch);
  s.outElems = 0;
  return s;
}

// ---- allreduce_into_shared: Average from the harness's memory into system-allocated memory
// (DistributedOptimizer's path for a large gradient: autograd's fresh tensor into its bucket) ---

void intoSharedFill(RowContext& row) {
  adoptShared(row, row.out[0]);
  averageFill(row);
  zero(row.out[0]);
}
void intoSharedRun(RowContext& row) {
  row.comm->allreduceAverageInto(row.in[0].data(), row.out[0].data(), row.count, row.type);
  row.result = row.out[0].data();
}

double allreduceBus(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }
double gatherBus(int n) { return n > 1 ? double(n - 1) / n : 0.0; }
double oneBus(int) { return 1.0; }

}  // namespace

const std::vector<Collective>& allCollectives() {
  static const std::vector<Collective> kAll = {
      {"allreduce", "sum", allreduceBus, allreduceShape, allreduceFill, allreduceRun, allreduceCheck},
      {"allgather", "none", gatherBus, gatherShape, allgatherFill, allgatherRun, allgatherCheck},
      {"broadcast", "none", oneBus, broadcastShape, broadcastFill, broadcastRun, broadcastCheck},
      {"alltoall", "none", gatherBus, alltoallShape, alltoallFill, alltoallRun, alltoallCheck},
      {"reducescatter", "sum", gatherBus, reducescatterShape, reducescatterFill, reducescatterRun, reducescatterCheck},
      {"allreduce_batch", "sum", allreduceBus, batchShape, batchFill, batchRun, batchCheck},
      {"allreduce_shared", "avg", allreduceBus, sharedShape, sharedFill, sharedRun, sharedCheck},
      {"allreduce_average", "avg", allreduceBus, sharedShape, averageFill, sharedRun, sharedCheck},
      {"allreduce_into_shared", "avg", allreduceBus, allreduceShape, intoSharedFill, intoSharedRun, sharedCheck},
  };
  return kAll;
}

const Collective* findCollective(std::string_view name) {
  for (const auto& c : allCollectives())
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace hvd::bench
