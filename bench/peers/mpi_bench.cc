// The MPI peer: the shared harness over MPI_COMM_WORLD (MPI_Allreduce, MPI_Allgather,
// MPI_Bcast, MPI_Alltoall, MPI_Reduce_scatter_block, MPI_Iallreduce x k + MPI_Waitall). Same
// flags and row format as hvd_bench, so bench/compare can put the rows side by side.
//
//   mpirun -np 2 build/bench/mpi_bench -o allreduce -b 4 -e 256M -f 4
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "harness/bench_main.h"

namespace hvd::bench {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_bench: %s failed (%d)\n", what, rc);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

MPI_Datatype mpiType(ElemType type) {
  switch (type) {
    case ElemType::kUInt8: return MPI_UINT8_T;
    case ElemType::kInt32: return MPI_INT32_T;
    case ElemType::kInt64: return MPI_INT64_T;
    case ElemType::kFloat32: return MPI_FLOAT;
    case ElemType::kFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

class MpiComm : public BenchComm {
 public:
  MpiComm(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiComm() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string systemName() const override {
    const char* tuned = std::getenv("MALLOC_MMAP_MAX_");
    return tuned ? "openmpi-malloc-tuned" : "openmpi";
  }
  bool supports(ElemType type) const override { return mpiType(type) != MPI_DATATYPE_NULL; }

  void allreduce(const void* in, void* out, size_t count, ElemType type) override {
    check(MPI_Allreduce(in, out, int(count), mpiType(type), MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
  const void* allgather(const void* in, size_t countPerRank, ElemType type, void* scratch) override {
    check(
        MPI_Allgather(in, int(countPerRank), mpiType(type), scratch, int(countPerRank), mpiType(type), MPI_COMM_WORLD),
        "MPI_Allgather");
    return scratch;
  }
  void broadcast(void* buffer, size_t count, ElemType type, int root) override {
    check(MPI_Bcast(buffer, int(count), mpiType(type), root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  const void* alltoall(const void* in, size_t countPerRank, ElemType type, void* scratch) override {
    check(MPI_Alltoall(in, int(countPerRank), mpiType(type), scratch, int(countPerRank), mpiType(type), MPI_COMM_WORLD),
          "MPI_Alltoall");
    return scratch;
  }
  void reducescatter(const void* in, void* out, size_t countPerRank, ElemType type) override {
    check(MPI_Reduce_scatter_block(in, out, int(countPerRank), mpiType(type), MPI_SUM, MPI_COMM_WORLD),
          "MPI_Reduce_scatter_block");
  }
  void allreduceBatch(const std::vector<const void*>& in, const std::vector<void*>& out, size_t count,
                      ElemType type) override {
    requests_.resize(in.size());
    for (size_t j = 0; j < in.size(); ++j)
      check(MPI_Iallreduce(in[j], out[j], int(count), mpiType(type), MPI_SUM, MPI_COMM_WORLD, &requests_[j]),
            "MPI_Iallreduce");
    check(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void maxOverRanks(std::vector<double>& values) override {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  std::vector<MPI_Request> requests_;
};

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  return hvd::bench::benchMain(argc, argv, [&] { return std::make_unique<hvd::bench::MpiComm>(&argc, &argv); });
}
