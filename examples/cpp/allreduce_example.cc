// A small Horovod C++ program: allreduce, allgather and broadcast, with the results checked.
//
//   horovodrun -np 2 ./build/examples/cpp/allreduce_example
//
// Exits 0 when every result is right on this rank, 1 otherwise.
#include <horovod/horovod.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

hvd::TensorView floats(std::vector<float>& values, std::vector<int64_t> shape) {
  hvd::TensorView view;
  view.data = values.data();
  view.dtype = hvd::DataType::kFloat32;
  view.shape = std::move(shape);
  return view;
}

int failures = 0;

void check(bool ok, const char* what, int index, double got, double want) {
  if (!ok && failures++ < 5) {
    std::fprintf(stderr, "rank %d: %s[%d] = %g, expected %g\n", hvd::rank(), what, index, got, want);
  }
}

}  // namespace

int main() {
  try {
    hvd::init();
    const int rank = hvd::rank();
    const int size = hvd::size();
    std::printf("rank %d of %d (local rank %d of %d)\n", rank, size, hvd::localRank(), hvd::localSize());

    // Allreduce: every rank contributes rank + i; Sum and Average over ranks.
    const int n = 1024;
    std::vector<float> in(n), sum(n), avg(n);
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(rank + i);
    hvd::Options options;
    options.name = "example.sum";
    options.op = hvd::ReduceOp::kSum;
    hvd::allreduce(floats(in, {n}), floats(sum, {n}), options);
    options.name = "example.average";
    options.op = hvd::ReduceOp::kAverage;
    hvd::allreduce(floats(in, {n}), floats(avg, {n}), options);
    const double rankSum = size * (size - 1) / 2.0;
    for (int i = 0; i < n; ++i) {
      double want = rankSum + static_cast<double>(size) * i;
      check(sum[i] == static_cast<float>(want), "sum", i, sum[i], want);
      check(std::abs(avg[i] - want / size) < 1e-3, "average", i, avg[i], want / size);
    }

    // Allgather: rank r contributes r + 1 rows of 2 values, all equal to r.
    std::vector<float> rows(static_cast<size_t>(2 * (rank + 1)), static_cast<float>(rank));
    hvd::Options gather;
    gather.name = "example.allgather";
    hvd::OwnedTensor gathered = hvd::allgather(floats(rows, {rank + 1, 2}), gather);
    const auto* g = static_cast<const float*>(gathered.view.data);
    int64_t expectedRows = static_cast<int64_t>(size) * (size + 1) / 2;
    check(gathered.view.shape[0] == expectedRows, "allgather rows", 0, static_cast<double>(gathered.view.shape[0]),
          static_cast<double>(expectedRows));
    int64_t k = 0;
    for (int r = 0; r < size && gathered.view.shape[0] == expectedRows; ++r) {
      for (int i = 0; i < 2 * (r + 1); ++i, ++k) check(g[k] == r, "allgather", static_cast<int>(k), g[k], r);
    }

    // Broadcast from rank 0.
    std::vector<float> params(16, static_cast<float>(rank == 0 ? 42 : -1));
    hvd::Options bcast;
    bcast.name = "example.broadcast";
    bcast.root = 0;
    hvd::broadcast(floats(params, {16}), bcast);
    for (int i = 0; i < 16; ++i) check(params[i] == 42.0f, "broadcast", i, params[i], 42);

    hvd::barrier();
    if (failures == 0) std::printf("rank %d: OK\n", rank);
    hvd::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "Horovod error: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
