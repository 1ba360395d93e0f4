// The free functions of horovod.h and the C API, on the process's default runtime (one rank).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/default_runtime.h"
#include "horovod/c_api.h"
#include "horovod/horovod.h"

namespace hvd {
namespace {

const std::string kNotInit = "Horovod has not been initialized; use hvd.init().";

void initSingle() {
  api::initDefault({}, mapEnvironment({{"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "1"}, {"HOROVOD_TRANSPORT", "local"}}));
}

TensorView floats(std::vector<float>& v) {
  TensorView t;
  t.data = v.data();
  t.dtype = DataType::kFloat32;
  t.shape = {static_cast<int64_t>(v.size())};
  return t;
}

TEST(Api, BeforeInit) {
  ASSERT_FALSE(isInitialized());
  try {
    rank();
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.what(), kNotInit);
  }
  EXPECT_THROW(localSize(), InvalidArgument);
  std::vector<float> a(2);
  try {
    allreduceAsync(floats(a), floats(a), {});
    ADD_FAILURE();
  } catch (const InvalidArgument&) {
    ADD_FAILURE() << "ops before init raise Error, not InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), kNotInit);
  }
  int r = -1;
  EXPECT_EQ(hvd_rank(&r), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hvd_last_error()), kNotInit);
}

TEST(Api, InitIsIdempotentAndReinitWorks) {
  for (int round = 0; round < 2; ++round) {
    initSingle();
    initSingle();  // no-op
    ASSERT_TRUE(isInitialized());
    EXPECT_EQ(rank(), 0);
    EXPECT_EQ(size(), 1);
    EXPECT_EQ(localRank(), 0);
    EXPECT_EQ(localSize(), 1);
    EXPECT_EQ(crossSize(), 1);
    EXPECT_TRUE(isHomogeneous());
    EXPECT_EQ(processSetIds(), std::vector<int>{0});
    std::vector<float> a = {1, 2, 3}, b(3);
    Options o;
    o.name = "x";
    o.op = ReduceOp::kAverage;
    allreduce(floats(a), floats(b), o);
    EXPECT_EQ(b, a);
    OwnedTensor g = allgather(floats(a), o);
    EXPECT_EQ(g.view.shape, std::vector<int64_t>{3});
    broadcast(floats(a), o);
    std::vector<int32_t> recv;
    OwnedTensor t = alltoall(floats(a), o, &recv);
    EXPECT_EQ(recv, std::vector<int32_t>{3});
    barrier();
    EXPECT_EQ(join(), 0);
    // One record per (backend, algorithm) that ran, in order of first use; join moves no data.
    std::vector<std::string> ran;
    for (const CollectiveCount& c : engineCounters()) {
      EXPECT_EQ(c.count, 1u) << c.algorithm;
      ran.push_back(c.backend + "/" + c.algorithm);
    }
    EXPECT_EQ(ran, (std::vector<std::string>{"cpu/local", "cpu/allgatherv", "cpu/broadcast", "cpu/alltoallv",
                                             "cpu/barrier"}));
    shutdown();
    EXPECT_FALSE(isInitialized());
    shutdown();  // harmless
    // After a shutdown, operations fail with Horovod's shutdown message; queries as before init.
    try {
      allreduceAsync(floats(a), floats(b), o);
      ADD_FAILURE();
    } catch (const Aborted& e) {
      EXPECT_NE(std::string(e.what()).find("Horovod has been shut down"), std::string::npos);
    }
    EXPECT_THROW(rank(), InvalidArgument);
    EXPECT_TRUE(engineCounters().empty());
  }
}

TEST(CApi, RoundTrip) {
  initSingle();
  ASSERT_EQ(hvd_is_initialized(), 1);
  int r = -1, s = -1;
  ASSERT_EQ(hvd_rank(&r), HVD_OK);
  ASSERT_EQ(hvd_size(&s), HVD_OK);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(s, 1);
  std::vector<double> in = {1.5, 2.5}, out(2);
  hvd_handle h = nullptr;
  ASSERT_EQ(hvd_allreduce_async(in.data(), out.data(), 2, HVD_FLOAT64, HVD_SUM, 2.0, 1.0, "c.x", 0, &h), HVD_OK);
  EXPECT_EQ(hvd_wait(h), HVD_OK);
  EXPECT_EQ(hvd_handle_done(h), 1);
  hvd_handle_release(h);
  EXPECT_EQ(out, (std::vector<double>{3.0, 5.0}));

  // Duplicate name while pending is impossible to provoke with one rank (it completes at once),
  // so check the error mapping with a bad argument and a bad process set.
  EXPECT_EQ(hvd_allreduce_async(in.data(), out.data(), 2, 99, HVD_SUM, 1.0, 1.0, "c.y", 0, &h),
            HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hvd_last_error()).find("dtype"), std::string::npos);
  EXPECT_EQ(hvd_allreduce_async(in.data(), out.data(), 2, HVD_FLOAT64, HVD_SUM, 1.0, 1.0, "c.y", 5, &h),
            HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hvd_last_error()),
            "Allreduce: Process set provided does not exist, or has not been registered.");

  std::vector<int32_t> rows = {7, 8, 9, 10};
  ASSERT_EQ(hvd_allgather_async(rows.data(), 2, 2, HVD_INT32, "c.ag", 0, &h), HVD_OK);
  ASSERT_EQ(hvd_wait_for(h, 10000), HVD_OK);
  const void* data = nullptr;
  int64_t count = 0;
  ASSERT_EQ(hvd_handle_output(h, 0, &data, &count), HVD_OK);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(static_cast<const int32_t*>(data)[3], 10);
  EXPECT_EQ(hvd_handle_output(h, 1, &data, &count), HVD_ERR_INVALID_ARGUMENT);
  hvd_handle_release(h);

  ASSERT_EQ(hvd_broadcast(rows.data(), 4, HVD_INT32, 0, "c.bc"), HVD_OK);
  ASSERT_EQ(hvd_barrier(0), HVD_OK);
  int last = -1;
  ASSERT_EQ(hvd_join(&last), HVD_OK);
  EXPECT_EQ(last, 0);
  int id = -1;
  EXPECT_EQ(hvd_add_process_set(&r, 1, &id), HVD_ERR_INVALID_ARGUMENT);  // not dynamic
  EXPECT_NE(std::string(hvd_last_error()).find("HOROVOD_DYNAMIC_PROCESS_SETS"), std::string::npos);
  ASSERT_EQ(hvd_shutdown(), HVD_OK);
  EXPECT_EQ(hvd_is_initialized(), 0);
  // Operations after a shutdown fail with Horovod's shutdown message (Aborted).
  EXPECT_EQ(hvd_allreduce(in.data(), out.data(), 2, HVD_FLOAT64, HVD_SUM, "c.z"), HVD_ERR_ABORTED);
  EXPECT_NE(std::string(hvd_last_error()).find("Horovod has been shut down"), std::string::npos);
}

TEST(Api, BadEnvironmentFailsInitNamingVariable) {
  try {
    api::initDefault({}, mapEnvironment({{"HOROVOD_FUSION_THRESHOLD", "12abc"}}));
    ADD_FAILURE() << "init accepted a bad value";
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("HOROVOD_FUSION_THRESHOLD"), std::string::npos) << msg;
    EXPECT_NE(msg.find("12abc"), std::string::npos) << msg;
  }
  EXPECT_FALSE(isInitialized());
}

}  // namespace
}  // namespace hvd
