#include "engine/negotiation.h"

#include <algorithm>

#include "engine/negotiation_rules.h"

namespace hvd::engine {
namespace {

Response errorResponse(const Request& first, std::string message) {
  Response r;
  r.params.kind = Kind::kError;
  r.params.processSet = first.params.processSet;
  r.params.dtype = first.params.dtype;
  TensorInfo t;
  t.name = first.name;
  r.tensors.push_back(std::move(t));
  r.error = std::move(message);
  return r;
}

}  // namespace

std::string mismatchMessage(const std::vector<Request>& requests, const NegotiationContext& context) {
  return firstMismatch(requests, context);
}

bool conflicting(const Request& a, const Request& b) { return pairDisagrees(a, b); }

int setIndexOf(const std::vector<int>& setRanks, int globalRank) {
  auto it = std::lower_bound(setRanks.begin(), setRanks.end(), globalRank);
  if (it == setRanks.end() || *it != globalRank) return -1;
  return static_cast<int>(it - setRanks.begin());
}

Response constructResponse(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  const Request& first = requests[0];
  std::string error = firstMismatch(requests, ctx);
  if (!error.empty()) return errorResponse(first, std::move(error));

  Response r;
  r.params = first.params;
  TensorInfo t;
  t.name = first.name;
  t.shape = first.shape;
  t.group = first.group;
  t.groupSize = first.groupSize;
  const std::vector<int>& setRanks = *ctx.setRanks;
  const size_t setSize = setRanks.size();
  if (r.params.kind == Kind::kAllgather || r.params.kind == Kind::kAlltoall) {
    t.firstDims.assign(setSize, 0);
    if (r.params.kind == Kind::kAlltoall) t.splits.assign(setSize * setSize, 0);
    for (const auto& req : requests) {
      int idx = setIndexOf(setRanks, req.rank);
      if (idx < 0) continue;
      t.firstDims[idx] = req.shape.empty() ? 0 : req.shape[0];
      if (r.params.kind == Kind::kAlltoall) {
        std::copy(req.splits.begin(), req.splits.end(), t.splits.begin() + static_cast<ptrdiff_t>(idx * setSize));
      }
    }
  } else if (r.params.kind == Kind::kAddProcessSet) {
    r.setRanks = first.splits;
  } else if (r.params.kind == Kind::kRemoveProcessSet) {
    r.setId = first.splits.empty() ? -1 : first.splits[0];
  }
  r.tensors.push_back(std::move(t));
  return r;
}

int64_t fusionBytes(Kind kind, DataType dtype, const TensorInfo& t) {
  const int64_t elem = static_cast<int64_t>(dataTypeSize(dtype));
  if (kind == Kind::kAllgather) {
    int64_t rows = 0;
    for (auto d : t.data().firstDims) rows += d;
    return rows * t.rowElements() * elem;
  }
  return t.numElements() * elem;
}

int64_t fusionBytes(const Response& response) {
  int64_t total = 0;
  for (const auto& t : response.tensors) total += fusionBytes(response.params.kind, response.params.dtype, t);
  return total;
}

}  // namespace hvd::engine
