// Errors through the whole engine: negotiation mismatches reach every rank and the engine keeps
// running; enqueue-time checks throw synchronously with Horovod's messages.
#include <gtest/gtest.h>

#include "cluster.h"
#include "typed.h"

namespace hvd::test {
namespace {

// A follow-up op proves the engine still runs after an error.
void expectHealthy(engine::Runtime& rt, int n, const std::string& name) {
  std::vector<int32_t> one(3, 1), out(3);
  rt.allreduce(view(one, DataType::kInt32), view(out, DataType::kInt32), named(name))->wait();
  for (int32_t v : out) ASSERT_EQ(v, n);
}

TEST(Errors, DtypeAndShapeMismatchFailOnEveryRank) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    Buffer in(rank == 1 ? DataType::kInt32 : DataType::kFloat32, 4),
        out(rank == 1 ? DataType::kInt32 : DataType::kFloat32, 4);
    auto w = rt.allreduce(in.view(), out.view(), named("dt"));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Mismatched data types: One rank had type ");
    std::vector<float> a(rank == 2 ? 5 : 4), b(a.size());
    auto w2 = rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("sh"));
    expectThrowWith<MismatchError>([&] { w2->wait(); },
                                   "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [");
    expectHealthy(rt, 3, "after");
  });
}

TEST(Errors, ExactMessageWithKnownFirstRequester) {
  // Rank 0 submits first (the barrier orders it), so requests[0] is rank 0's.
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<double> a(rank == 0 ? 2 : 3), b(a.size());
    WorkPtr w;
    if (rank == 0) w = rt.allreduce(view(a, DataType::kFloat64), view(b, DataType::kFloat64), named("x"));
    rt.barrier(0)->wait();
    if (rank == 1) w = rt.allreduce(view(a, DataType::kFloat64), view(b, DataType::kFloat64), named("x"));
    expectThrowWith<MismatchError>([&] { w->wait(); },
                                   "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2], but "
                                   "another rank sent a tensor of shape [3].");
  });
}

TEST(Errors, BroadcastRootAndAllgatherDimMismatch) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> t(4);
    Options o = named("bcast");
    o.root = rank;  // ranks disagree on the root
    auto w = rt.broadcast(view(t, DataType::kFloat32), o);
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Mismatched BROADCAST root ranks");
    std::vector<float> g(static_cast<size_t>(rank == 0 ? 6 : 8));
    auto w2 = rt.allgather(view(g, DataType::kFloat32, {2, rank == 0 ? 3 : 4}), named("agdim"));
    expectThrowWith<MismatchError>([&] { w2->wait(); }, "tensor with dimension 1 equal to");
    expectHealthy(rt, 2, "after2");
  });
}

TEST(Errors, DuplicateNameWhilePending) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> a(4, 1.0f), b(4);
    WorkPtr first;
    if (rank == 0) {
      first = rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("dup"));
      expectThrowWith<InvalidArgument>(
          [&] { rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("dup")); },
          "Requested to allreduce, allgather, or broadcast a tensor with the same name as another tensor that is "
          "currently being processed.  If you want to request another tensor, use a different tensor name.");
      EXPECT_FALSE(first->isCompleted());
    }
    // Unrelated ops proceed while "dup" is pending.
    rt.barrier(0)->wait();
    if (rank == 1) first = rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("dup"));
    first->wait();
    for (float f : b) ASSERT_EQ(f, 2.0f);
    // Completed names can be reused.
    rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("dup"))->wait();
  });
}

TEST(Errors, EnqueueTimeChecks) {
  Cluster cluster(3, {}, InitOptions{{{0, 1}}, false});
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> a(6), b(6);
    expectThrowWith<InvalidArgument>(
        [&] { rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("u", ReduceOp::kSum, 7)); },
        "Allreduce: Process set provided does not exist, or has not been registered.");
    if (rank == 2) {
      expectThrowWith<InvalidArgument>(
          [&] { rt.allgather(view(a, DataType::kFloat32), named("nm", ReduceOp::kSum, 1)); },
          "Allgather: Rank 2 is not a member of the provided process set.");
      expectThrowWith<InvalidArgument>([&] { rt.barrier(1); },
                                       "Barrier: Rank 2 is not a member of the provided process set.");
    } else {
      Options o = named("root", ReduceOp::kSum, 1);
      o.root = 2;
      expectThrowWith<InvalidArgument>([&] { rt.broadcast(view(a, DataType::kFloat32), o); },
                                       "broadcast received invalid root rank 2 for provided process set");
    }
    Options s = named("a2a");
    expectThrowWith<InvalidArgument>([&] { rt.alltoall(view(a, DataType::kFloat32, {2, 3}), s); },
                                     "splits not provided, but first dimension of tensor is not an even multiple "
                                     "of the number of workers.");
    s.splits = {1, 1};
    expectThrowWith<InvalidArgument>([&] { rt.alltoall(view(a, DataType::kFloat32, {6}), s); },
                                     "Number of entries in splits does not equal number of workers.");
    s.splits = {3, 3, 1};
    expectThrowWith<InvalidArgument>([&] { rt.alltoall(view(a, DataType::kFloat32, {6}), s); },
                                     "Sum of splits entries is greater than the first dimension of tensor.");
    try {
      rt.reducescatter(view(a, DataType::kFloat32), view(b, DataType::kFloat32, {2}), named("rs", ReduceOp::kMax));
      ADD_FAILURE() << "reducescatter with Max accepted";
    } catch (const InvalidArgument&) {
      ADD_FAILURE() << "reducescatter op error must not be InvalidArgument";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "Reducescatter currently only supports AVERAGE and SUM.");
    }
  });
}

TEST(Errors, AdasumRefusalsAndReducescatterPrescaleAreNegotiationErrors) {
  Cluster cluster(2, {{"HOROVOD_FUSION_THRESHOLD", "64"}});
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<int32_t> a(4), b(4);
    auto w = rt.allreduce(view(a, DataType::kInt32), view(b, DataType::kInt32), named("ada", ReduceOp::kAdasum));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Adasum reduces only float16, bfloat16, float32 and float64");
    std::vector<float> big(1024), out(512);
    Options o = named("rsp");
    o.prescale = 2.0;
    auto w2 = rt.reducescatter(view(big, DataType::kFloat32), view(out, DataType::kFloat32), o);
    expectThrowWith<MismatchError>([&] { w2->wait(); },
                                   "Reducescatter with prescale_factor == 2 != 1.0: The fusion buffer is not large "
                                   "enough to hold the input tensor (4096 bytes); increase HOROVOD_FUSION_THRESHOLD.");
  });
}

}  // namespace
}  // namespace hvd::test
