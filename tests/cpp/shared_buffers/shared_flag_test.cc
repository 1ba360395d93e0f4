// The sharedInPlace flag through the engine's control plane: it survives the wire, a cache hit
// implies the same flag, and flagged responses are never fused.
#include <gtest/gtest.h>

#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace hvd::engine {
namespace {

Request request(const std::string& name, bool shared) {
  Request r;
  r.params.kind = Kind::kAllreduce;
  r.name = name;
  r.params.dtype = DataType::kFloat32;
  r.shape = {16};
  r.params.sharedInPlace = shared;
  return r;
}

Response response(const std::string& name, bool shared) {
  Response r;
  r.params = request(name, shared).params;
  TensorInfo t;
  t.name = name;
  t.shape = {16};
  r.tensors.push_back(t);
  return r;
}

TEST(SharedFlag, SurvivesTheWire) {
  RequestList requests;
  requests.requests = {request("a", true), request("b", false)};
  std::vector<uint8_t> bytes;
  encode(requests, bytes);
  RequestList back = decodeRequestList(bytes);
  ASSERT_EQ(back.requests.size(), 2u);
  EXPECT_TRUE(back.requests[0].params.sharedInPlace);
  EXPECT_FALSE(back.requests[1].params.sharedInPlace);

  ResponseList responses;
  responses.seq = 1;
  responses.items = {response("a", true), response("b", false)};
  encode(responses, bytes);
  ResponseList out = decodeResponseList(bytes);
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_TRUE(out.items[0].params.sharedInPlace);
  EXPECT_FALSE(out.items[1].params.sharedInPlace);
}

TEST(SharedFlag, CacheHitImpliesTheSameFlag) {
  Response flagged = response("a", true);
  CacheEntry entry = CacheEntry::fromResponse(flagged, flagged.tensors[0]);
  EXPECT_TRUE(entry.params.sharedInPlace);
  EXPECT_TRUE(entry.matches(request("a", true), 0));
  EXPECT_FALSE(entry.matches(request("a", false), 0));
  EXPECT_TRUE(entry.requestFor(1, 1).params.sharedInPlace);
  Response plain = response("a", false);
  CacheEntry other = CacheEntry::fromResponse(plain, plain.tensors[0]);
  EXPECT_FALSE(other.matches(request("a", true), 0));
}

TEST(SharedFlag, FlaggedResponsesAreNeverFused) {
  FusionOptions options;
  options.threshold = 1 << 20;
  std::vector<Response> in = {response("a", false), response("b", true), response("c", false), response("d", true)};
  std::vector<Response> out = fuseResponses(in, options);
  // a and c fuse (b is skipped over), b and d stay alone.
  ASSERT_EQ(out.size(), 3u);
  size_t alone = 0;
  for (const auto& r : out) {
    if (r.params.sharedInPlace) {
      EXPECT_EQ(r.tensors.size(), 1u);
      ++alone;
    } else {
      EXPECT_EQ(r.tensors.size(), 2u);
    }
  }
  EXPECT_EQ(alone, 2u);
}

}  // namespace
}  // namespace hvd::engine
