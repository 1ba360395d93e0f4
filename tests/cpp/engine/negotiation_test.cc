// Negotiation checks and messages (semantics.md §3), fusion planning (§5) and the wire format,
// as pure functions.
#include <gtest/gtest.h>

#include "common/byte_codec.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/negotiation.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

Request req(Kind kind, DataType dtype, std::vector<int64_t> shape, int rank) {
  Request r;
  r.params.kind = kind;
  r.name = "t";
  r.params.dtype = dtype;
  r.shape = std::move(shape);
  r.rank = rank;
  return r;
}

// The whole error message ("" when the requests agree).
std::string negotiateFull(const std::vector<Request>& requests, int joined = 0, int64_t threshold = 1 << 20) {
  static const std::vector<int> ranks = {0, 1, 2};
  NegotiationContext ctx;
  ctx.setRanks = &ranks;
  ctx.joinedCount = joined;
  ctx.fusionThreshold = threshold;
  Response r = constructResponse(requests, ctx);
  return r.params.kind == Kind::kError ? r.error : "";
}

// Horovod's sentence only: mismatch messages go on with which ranks asked for what, " (...)"
// (checked in RanksOnEachSide).
std::string negotiate(const std::vector<Request>& requests, int joined = 0, int64_t threshold = 1 << 20) {
  std::string text = negotiateFull(requests, joined, threshold);
  const size_t detail = text.find(". (");
  return detail == std::string::npos ? text : text.substr(0, detail + 1);
}

TEST(Negotiation, RanksOnEachSide) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = req(Kind::kAllreduce, DataType::kInt32, {4}, 1);
  EXPECT_EQ(negotiateFull({a, b}),
            "Mismatched data types: One rank had type float32, but another rank had type int32. (float32: rank 0; "
            "int32: rank 1; not submitted yet: rank 2)");
  auto c = req(Kind::kAllgather, DataType::kFloat32, {4}, 2);
  EXPECT_EQ(negotiateFull({a, c, req(Kind::kAllgather, DataType::kFloat32, {4}, 1)}),
            "Mismatched operations: One rank did an ALLREDUCE, but another rank did an ALLGATHER. (ALLREDUCE: rank 0; "
            "ALLGATHER: ranks 1, 2)");
  Request sum = a, max = b;
  max.params.dtype = DataType::kFloat32;
  sum.params.op = ReduceOp::kSum;
  max.params.op = ReduceOp::kMax;
  EXPECT_EQ(negotiateFull({sum, max}),
            "Mismatched reduction operation: One rank sent reduction op Sum, but another rank sent reduction op Max. "
            "(Sum: rank 0; Max: rank 1; not submitted yet: rank 2)");
}

TEST(Negotiation, DataTypes) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = req(Kind::kAllreduce, DataType::kInt32, {4}, 1);
  EXPECT_EQ(negotiate({a, b}), "Mismatched data types: One rank had type float32, but another rank had type int32.");
}

TEST(Negotiation, Operations) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = req(Kind::kAdasum, DataType::kFloat32, {4}, 1);
  EXPECT_EQ(negotiate({a, b}), "Mismatched operations: One rank did an ALLREDUCE, but another rank did an ADASUM.");
}

TEST(Negotiation, Shapes) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {2, 3}, 0);
  auto b = req(Kind::kAllreduce, DataType::kFloat32, {3, 2}, 1);
  EXPECT_EQ(negotiate({a, b}),
            "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2, 3], but another rank sent a "
            "tensor of shape [3, 2].");
  a.params.kind = b.params.kind = Kind::kBroadcast;
  EXPECT_EQ(negotiate({a, b}).rfind("Mismatched BROADCAST tensor shapes", 0), 0u);
}

TEST(Negotiation, ScaleFactors) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = a;
  b.rank = 1;
  b.params.postscale = 0.5;
  EXPECT_EQ(negotiate({a, b}),
            "Mismatched prescale and/or postscale factors: One rank sent factors (1, 1), but another rank sent "
            "factors (1, 0.5).");
}

TEST(Negotiation, ReduceOp) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = a;
  b.params.op = ReduceOp::kMax;
  a.params.op = ReduceOp::kSum;
  EXPECT_EQ(negotiate({a, b}),
            "Mismatched reduction operation: One rank sent reduction op Sum, but another rank sent reduction op Max.");
}

TEST(Negotiation, AllgatherChecks) {
  auto a = req(Kind::kAllgather, DataType::kFloat32, {2, 3}, 0);
  auto b = req(Kind::kAllgather, DataType::kFloat32, {5, 3}, 1);
  EXPECT_EQ(negotiate({a, b}), "");
  EXPECT_EQ(negotiate({a, b}, 1),
            "Allgather is not supported with Join at this time. Specify sparse_to_dense=True if using "
            "DistributedOptimizer");
  auto scalar = req(Kind::kAllgather, DataType::kFloat32, {}, 0);
  EXPECT_EQ(negotiate({scalar, b}), "Process-set rank zero tried to ALLGATHER a rank-zero tensor.");
  auto rank3 = req(Kind::kAllgather, DataType::kFloat32, {2, 3, 1}, 1);
  EXPECT_EQ(negotiate({a, rank3}),
            "Mismatched ALLGATHER tensor shapes: One rank sent a tensor of rank 2, but another rank sent a tensor "
            "of rank 3.");
  auto dim = req(Kind::kAllgather, DataType::kFloat32, {2, 4}, 1);
  EXPECT_EQ(negotiate({a, dim}),
            "Mismatched ALLGATHER tensor shapes: One rank sent a tensor with dimension 1 equal to 3, but another "
            "rank sent a tensor with dimension 1 equal to 4.");
  auto x = req(Kind::kAlltoall, DataType::kFloat32, {2}, 0);
  EXPECT_EQ(negotiate({x}, 1), "Alltoall is not supported with Join at this time.");
}

TEST(Negotiation, AllgatherCollectsFirstDims) {
  static const std::vector<int> ranks = {1, 4, 6};
  NegotiationContext ctx;
  ctx.setRanks = &ranks;
  Response r = constructResponse(
      {req(Kind::kAllgather, DataType::kInt8, {3, 2}, 6), req(Kind::kAllgather, DataType::kInt8, {0, 2}, 1),
       req(Kind::kAllgather, DataType::kInt8, {5, 2}, 4)},
      ctx);
  ASSERT_EQ(r.params.kind, Kind::kAllgather);
  EXPECT_EQ(r.tensors[0].firstDims, (std::vector<int64_t>{0, 5, 3}));
  EXPECT_EQ(fusionBytes(r), 16);
}

TEST(Negotiation, ReducescatterChecks) {
  auto a = req(Kind::kReducescatter, DataType::kFloat32, {8}, 0);
  EXPECT_EQ(negotiate({a}, 1), "Reducescatter is not supported with Join at this time.");
  auto s = req(Kind::kReducescatter, DataType::kFloat32, {}, 0);
  EXPECT_EQ(negotiate({s}), "Process-set rank zero tried to REDUCESCATTER a rank-zero tensor.");
  a.params.prescale = 2.0;
  EXPECT_EQ(negotiate({a}, 0, 16),
            "Reducescatter with prescale_factor == 2 != 1.0: The fusion buffer is not large enough to hold the "
            "input tensor (32 bytes); increase HOROVOD_FUSION_THRESHOLD.");
  EXPECT_EQ(negotiate({a}, 0, 32), "");
}

TEST(Negotiation, BroadcastChecks) {
  auto a = req(Kind::kBroadcast, DataType::kFloat32, {4}, 0);
  a.params.root = 0;
  auto b = a;
  b.rank = 1;
  b.params.root = 2;
  EXPECT_EQ(negotiate({a}, 1), "Broadcast is not supported with Join at this time.");
  EXPECT_EQ(negotiate({a, b}),
            "Mismatched BROADCAST root ranks: One rank specified root rank 0, but another rank specified root rank 2.");
}

TEST(Negotiation, DevicePlacement) {
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = a;
  b.params.device = 0;
  EXPECT_EQ(negotiate({a, b}),
            "Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device CPU, but another rank "
            "specified device GPU.");
}

TEST(Negotiation, FirstMismatchWinsInCheckOrder) {
  // Rank 1 differs in shape, rank 2 in dtype: the dtype check runs over all requests first.
  auto a = req(Kind::kAllreduce, DataType::kFloat32, {4}, 0);
  auto b = req(Kind::kAllreduce, DataType::kFloat32, {5}, 1);
  auto c = req(Kind::kAllreduce, DataType::kFloat64, {4}, 2);
  EXPECT_EQ(negotiate({a, b, c}).rfind("Mismatched data types", 0), 0u);
}

TEST(Negotiation, UnsupportedScaling) {
  auto a = req(Kind::kAllreduce, DataType::kInt16, {4}, 0);
  a.params.op = ReduceOp::kAverage;
  EXPECT_EQ(negotiate({a}), "Type int16 not supported by ScaleBufferCPUImpl.");
  a.params.kind = Kind::kAdasum;
  EXPECT_EQ(negotiate({a}), "Adasum reduces only float16, bfloat16, float32 and float64 tensors; tensor t is int16.");
  // The context's set has 3 ranks: not a power of two.
  a.params.dtype = DataType::kFloat32;
  EXPECT_EQ(negotiate({a}),
            "Running Adasum with non-power of 2 ranks is not supported yet (process set 0 has 3 ranks).");
  // GPU tensors: the GPU Adasum's condition is on hosts, which the GPU backends check; negotiation
  // lets 3 ranks through.
  a.params.device = 0;
  EXPECT_EQ(negotiate({a}), "");
}

Response single(Kind kind, DataType dtype, int64_t elements, const std::string& name) {
  Response r;
  r.params.kind = kind;
  r.params.dtype = dtype;
  TensorInfo t;
  t.name = name;
  t.shape = {elements};
  if (kind == Kind::kAllgather) t.firstDims = {elements};
  r.tensors.push_back(t);
  return r;
}

TEST(Fusion, GreedyWithLookAhead) {
  FusionOptions options;
  options.threshold = 64;
  std::vector<Response> in = {single(Kind::kAllreduce, DataType::kFloat32, 4, "a"),
                              single(Kind::kAllreduce, DataType::kFloat64, 2, "b"),  // skipped, fits
                              single(Kind::kAllreduce, DataType::kFloat32, 4, "c"),
                              single(Kind::kBroadcast, DataType::kFloat32, 1, "d"),
                              single(Kind::kAllreduce, DataType::kFloat32, 4, "e")};
  auto out = fuseResponses(in, options);
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[0].tensors.size(), 3u);  // a, c, e
  EXPECT_EQ(out[0].tensors[1].name, "c");
  EXPECT_EQ(out[0].tensors[2].name, "e");
  EXPECT_EQ(out[1].tensors[0].name, "b");
  EXPECT_EQ(out[2].params.kind, Kind::kBroadcast);
}

TEST(Fusion, ThresholdAndSkipBudget) {
  FusionOptions options;
  options.threshold = 32;
  std::vector<Response> in = {single(Kind::kAllreduce, DataType::kFloat32, 4, "a"),    // 16 bytes
                              single(Kind::kAllreduce, DataType::kFloat64, 4, "b"),    // 32: skip budget exceeded
                              single(Kind::kAllreduce, DataType::kFloat32, 4, "c")};
  auto out = fuseResponses(in, options);
  ASSERT_EQ(out.size(), 3u);
  options.threshold = 0;
  EXPECT_EQ(fuseResponses(in, options).size(), 3u);
  options.threshold = 1000;
  std::vector<Response> same = {single(Kind::kAllreduce, DataType::kFloat32, 4, "a"),
                                single(Kind::kAllreduce, DataType::kFloat32, 4, "b")};
  same[1].params.op = ReduceOp::kMax;
  EXPECT_EQ(fuseResponses(same, options).size(), 2u);
  same[1].params.op = ReduceOp::kSum;
  same[1].params.processSet = 1;
  EXPECT_EQ(fuseResponses(same, options).size(), 2u);
}

TEST(Fusion, GroupFusionDisabled) {
  FusionOptions options;
  options.threshold = 1000;
  options.disableGroupFusion = true;
  auto a = single(Kind::kAllreduce, DataType::kFloat32, 4, "g_1of2");
  auto b = single(Kind::kAllreduce, DataType::kFloat32, 4, "g_2of2");
  auto c = single(Kind::kAllreduce, DataType::kFloat32, 4, "x");
  a.tensors[0].group = b.tensors[0].group = "g";
  auto out = fuseResponses({a, c, b}, options);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].tensors.size(), 2u);
  EXPECT_EQ(out[1].tensors[0].name, "x");
}

TEST(Kinds, OpKindsAreOpTypes) {
  for (int i = 0; i < kNumOpTypes; ++i) {
    const auto type = static_cast<OpType>(i);
    EXPECT_TRUE(isOpKind(kindOf(type)));
    EXPECT_EQ(opOf(kindOf(type)), type);
    EXPECT_EQ(kindName(kindOf(type)), opTypeName(type));
  }
  EXPECT_EQ(kindOf(OpType::kReducescatter), Kind::kReducescatter);
  EXPECT_FALSE(isOpKind(Kind::kAddProcessSet));
  EXPECT_EQ(kindName(Kind::kRemoveProcessSet), "REMOVE_PROCESS_SET");
  EXPECT_EQ(kindName(Kind::kEvict), "EVICT");
}

TEST(Wire, RoundTrip) {
  RequestList rl;
  rl.lastSeq = 77;
  rl.shutdown = true;
  rl.hits = {5, 6, 7, 9, 200};
  Request r = req(Kind::kAlltoall, DataType::kBFloat16, {6, 2}, 3);
  r.splits = {1, 2, 3};
  r.params.prescale = 0.25;
  r.group = "grp";
  r.groupSize = 3;
  r.oneOffName = true;
  rl.requests.push_back(r);
  r.oneOffName = false;
  r.params.sharedInPlace = true;
  rl.requests.push_back(r);
  std::vector<uint8_t> bytes;
  encode(rl, bytes);
  ASSERT_EQ(messageType(bytes), MessageType::kRequests);
  RequestList back = decodeRequestList(bytes);
  EXPECT_EQ(back.lastSeq, 77u);
  EXPECT_TRUE(back.shutdown);
  EXPECT_EQ(back.hits, rl.hits);
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_TRUE(back.requests[0].oneOffName);
  EXPECT_FALSE(back.requests[0].params.sharedInPlace);
  EXPECT_FALSE(back.requests[1].oneOffName);
  EXPECT_TRUE(back.requests[1].params.sharedInPlace);
  EXPECT_EQ(back.requests[0].splits, r.splits);
  EXPECT_EQ(back.requests[0].shape, r.shape);
  EXPECT_EQ(back.requests[0].params, rl.requests[0].params);
  EXPECT_EQ(back.requests[1].params, rl.requests[1].params);
  EXPECT_EQ(back.requests[0].group, "grp");

  // A dense hit vector of 160 ids costs about 20 bytes.
  RequestList dense;
  for (uint32_t i = 0; i < 160; ++i) dense.hits.push_back(1000 + i);
  encode(dense, bytes);
  EXPECT_LT(bytes.size(), 32u);
  EXPECT_EQ(decodeRequestList(bytes).hits, dense.hits);

  ResponseList list;
  list.seq = 9;
  Response full = single(Kind::kAllgather, DataType::kInt8, 3, "ag");
  full.tensors[0].cacheId = 4;
  full.tensors[0].cacheInsert = true;
  full.params.processSet = 2;
  full.params.root = 1;
  full.params.postscale = 0.5;  // scale factors travel only when not 1.0
  Response cached;
  cached.params.kind = Kind::kAllreduce;
  cached.cachedForm = true;
  for (uint32_t id : {3u, 1u, 2u}) {
    TensorInfo t;
    t.cacheId = id;
    cached.tensors.push_back(t);
  }
  Response error;
  error.params.kind = Kind::kError;
  error.error = "boom";
  error.tensors.push_back(TensorInfo{});
  list.items = {full, cached, error};
  encode(list, bytes);
  ResponseList lb = decodeResponseList(bytes);
  ASSERT_EQ(lb.items.size(), 3u);
  EXPECT_EQ(lb.items[0].params, full.params);
  EXPECT_EQ(lb.items[0].tensors[0].name, "ag");
  EXPECT_EQ(lb.items[0].tensors[0].cacheId, 4u);
  EXPECT_TRUE(lb.items[0].tensors[0].cacheInsert);
  EXPECT_TRUE(lb.items[1].cachedForm);
  EXPECT_EQ(lb.items[1].tensors[0].cacheId, 3u);
  EXPECT_EQ(lb.items[1].tensors[2].cacheId, 2u);
  EXPECT_EQ(lb.items[2].error, "boom");

  ErrorInfo info;
  info.kind = ErrorKind::kPeerLost;
  info.rank = 3;
  info.message = "gone";
  encode(info, bytes);
  ErrorInfo ib = decodeErrorInfo(bytes);
  try {
    std::rethrow_exception(ib.toException());
  } catch (const hvd::PeerLost& e) {
    EXPECT_EQ(e.rank(), 3);
    EXPECT_STREQ(e.what(), "gone");
  }
}

// What the engine reads off a failure (the relaying rank, whether a lost peer aborted) travels as
// fields, through the wire and through the exception, every kind alike.
TEST(Wire, ErrorFactsRoundTripThroughBytesAndExceptions) {
  const ErrorKind kinds[] = {ErrorKind::kError,   ErrorKind::kInvalidArgument, ErrorKind::kMismatch,
                             ErrorKind::kTimeout, ErrorKind::kPeerLost,        ErrorKind::kStore,
                             ErrorKind::kAborted};
  for (ErrorKind kind : kinds) {
    for (int relayedFrom : {-1, 0, 5}) {
      for (bool peerAborted : {false, true}) {
        if (peerAborted && kind != ErrorKind::kPeerLost) continue;
        ErrorInfo info;
        info.kind = kind;
        info.rank = kind == ErrorKind::kPeerLost ? 2 : -1;
        info.relayedFrom = relayedFrom;
        info.peerAborted = peerAborted;
        info.message = relayedFrom >= 0 ? "[from rank " + std::to_string(relayedFrom) + "] boom" : "boom";
        std::vector<uint8_t> bytes;
        encode(info, bytes);
        ErrorInfo back = ErrorInfo::fromException(decodeErrorInfo(bytes).toException());
        SCOPED_TRACE(static_cast<int>(kind));
        EXPECT_EQ(back.kind, info.kind);
        EXPECT_EQ(back.rank, info.rank);
        EXPECT_EQ(back.relayedFrom, relayedFrom);
        EXPECT_EQ(back.peerAborted, peerAborted);
        EXPECT_EQ(back.message, info.message);
        try {
          std::rethrow_exception(info.toException());
        } catch (const hvd::Error& e) {
          EXPECT_EQ(e.relayedFrom(), relayedFrom);
          EXPECT_EQ(e.what(), info.message);  // the text is not touched
        }
      }
    }
  }
  // This rank's own failures: not relayed, a PeerLost's peer vanished unless the transport said so.
  ErrorInfo own = ErrorInfo::fromException(std::make_exception_ptr(hvd::PeerLost(1, "lost")));
  EXPECT_EQ(own.relayedFrom, -1);
  EXPECT_FALSE(own.peerAborted);
  EXPECT_TRUE(ErrorInfo::fromException(std::make_exception_ptr(hvd::PeerLost(1, "lost", true))).peerAborted);
  EXPECT_EQ(ErrorInfo::fromException(std::make_exception_ptr(std::runtime_error("x"))).relayedFrom, -1);
  // Not an engine error kind, but the relay survives: RemovedFromJob is sent as a plain error.
  hvd::RemovedFromJob removed("removed");
  removed.setRelayedFrom(3);
  EXPECT_EQ(ErrorInfo::fromException(std::make_exception_ptr(removed)).relayedFrom, 3);
}

TEST(Wire, ErrorInfoDecodeChecksItsBounds) {
  ErrorInfo info;
  info.kind = ErrorKind::kPeerLost;
  info.rank = 1;
  info.relayedFrom = 0;
  info.peerAborted = true;
  info.message = "gone";
  std::vector<uint8_t> bytes;
  encode(info, bytes);
  // Every truncation fails to decode.
  for (size_t n = 1; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decodeErrorInfo(cut), DecodeError) << n;
  }
  // The flags byte (after kind, rank 1 and relayedFrom 0: one byte each) has no unknown bits.
  ASSERT_EQ(bytes[4], 1);
  bytes[4] = 3;
  EXPECT_THROW(decodeErrorInfo(bytes), DecodeError);
}

}  // namespace
}  // namespace hvd::engine
