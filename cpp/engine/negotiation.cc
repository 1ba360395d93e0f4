#include "engine/negotiation.h"

#include <algorithm>
#include <sstream>

namespace hvd::engine {
namespace {

std::string reduceOpLabel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "AVERAGE";
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kAdasum: return "ADASUM";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kProduct: return "PRODUCT";
  }
  return "op " + std::to_string(static_cast<int>(op));
}

bool isReduction(Kind k) { return k == Kind::kAllreduce || k == Kind::kAdasum || k == Kind::kReducescatter; }

// Horovod scales on the CPU only for these types ("not supported by ScaleBufferCPUImpl").
bool scalable(DataType t) { return t != DataType::kUInt16 && t != DataType::kInt16 && t != DataType::kBool; }

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

std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Which ranks asked for what: " (ALLREDUCE: rank 0; ALLGATHER: ranks 1, 2; not submitted yet:
// rank 3)", grouping the requests by label(request) in order of first appearance; the members
// of the process set with no request yet (joined ranks aside) come last.
template <typename Label>
std::string sides(const std::vector<Request>& requests, const NegotiationContext& ctx, Label label) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::vector<int> seen;
  for (const auto& q : requests) {
    std::string l = label(q);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == l; });
    if (it == groups.end()) it = groups.insert(groups.end(), {std::move(l), {}});
    it->second.push_back(q.rank);
    seen.push_back(q.rank);
  }
  std::string out = " (";
  for (size_t i = 0; i < groups.size(); ++i) {
    std::sort(groups[i].second.begin(), groups[i].second.end());
    out += (i ? "; " : "") + groups[i].first + ": " + rankList(groups[i].second);
  }
  if (ctx.setRanks != nullptr && ctx.joinedCount == 0) {
    std::vector<int> missing;
    for (int r : *ctx.setRanks) {
      if (std::find(seen.begin(), seen.end(), r) == seen.end()) missing.push_back(r);
    }
    if (!missing.empty()) out += "; not submitted yet: " + rankList(missing);
  }
  return out + ")";
}

std::string dims(const std::vector<int64_t>& shape) { return shapeString(shape); }

// Returns the first mismatch message, or "" when the requests agree.
std::string validate(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  const Request& first = requests[0];
  std::ostringstream msg;
  const size_t n = requests.size();

  for (size_t i = 1; i < n; ++i) {
    if (requests[i].params.dtype != first.params.dtype) {
      msg << "Mismatched data types: One rank had type " << dataTypeName(first.params.dtype)
          << ", but another rank had type " << dataTypeName(requests[i].params.dtype) << ".";
      return msg.str() + sides(requests, ctx, [](const Request& q) { return std::string(dataTypeName(q.params.dtype)); });
    }
  }
  for (size_t i = 1; i < n; ++i) {
    if (requests[i].params.kind != first.params.kind) {
      msg << "Mismatched operations: One rank did an " << kindName(first.params.kind) << ", but another rank did an "
          << kindName(requests[i].params.kind) << ".";
      return msg.str() + sides(requests, ctx, [](const Request& q) { return std::string(kindName(q.params.kind)); });
    }
  }
  const Kind kind = first.params.kind;
  if (isReduction(kind) || kind == Kind::kBroadcast) {
    for (size_t i = 1; i < n; ++i) {
      if (requests[i].shape != first.shape) {
        msg << "Mismatched " << kindName(kind) << " tensor shapes: One rank sent a tensor of shape "
            << shapeString(first.shape) << ", but another rank sent a tensor of shape "
            << shapeString(requests[i].shape) << ".";
        return msg.str() + sides(requests, ctx, [](const Request& q) { return dims(q.shape); });
      }
    }
  }
  if (isReduction(kind)) {
    for (size_t i = 1; i < n; ++i) {
      const OpParams& other = requests[i].params;
      if (other.prescale != first.params.prescale || other.postscale != first.params.postscale) {
        msg << "Mismatched prescale and/or postscale factors: One rank sent factors (" << first.params.prescale << ", "
            << first.params.postscale << "), but another rank sent factors (" << other.prescale << ", "
            << other.postscale << ").";
        return msg.str() + sides(requests, ctx, [](const Request& q) {
                 std::ostringstream f;
                 f << "(" << q.params.prescale << ", " << q.params.postscale << ")";
                 return f.str();
               });
      }
    }
  }
  if (kind == Kind::kAllreduce) {
    for (size_t i = 1; i < n; ++i) {
      if (requests[i].params.op != first.params.op) {
        msg << "Mismatched reduction operation: One rank sent reduction op " << static_cast<int>(first.params.op)
            << ", but another rank sent reduction op " << static_cast<int>(requests[i].params.op) << ".";
        return msg.str() + sides(requests, ctx, [](const Request& q) { return reduceOpLabel(q.params.op); });
      }
    }
  }
  if (kind == Kind::kAllgather || kind == Kind::kAlltoall) {
    if (ctx.joinedCount > 0) {
      return kind == Kind::kAllgather ? "Allgather is not supported with Join at this time. Specify "
                                        "sparse_to_dense=True if using DistributedOptimizer"
                                      : "Alltoall is not supported with Join at this time.";
    }
    if (first.shape.empty()) {
      msg << "Process-set rank zero tried to " << kindName(kind) << " a rank-zero tensor.";
      return msg.str();
    }
    for (size_t i = 1; i < n; ++i) {
      const auto& shape = requests[i].shape;
      if (shape.size() != first.shape.size()) {
        msg << "Mismatched " << kindName(kind) << " tensor shapes: One rank sent a tensor of rank "
            << first.shape.size() << ", but another rank sent a tensor of rank " << shape.size() << ".";
        return msg.str() + sides(requests, ctx, [](const Request& q) { return dims(q.shape); });
      }
      for (size_t d = 1; d < shape.size(); ++d) {
        if (shape[d] != first.shape[d]) {
          msg << "Mismatched " << kindName(kind) << " tensor shapes: One rank sent a tensor with dimension " << d
              << " equal to " << first.shape[d] << ", but another rank sent a tensor with dimension " << d
              << " equal to " << shape[d] << ".";
          return msg.str() + sides(requests, ctx, [](const Request& q) { return dims(q.shape); });
        }
      }
    }
  }
  if (kind == Kind::kReducescatter) {
    if (ctx.joinedCount > 0) return "Reducescatter is not supported with Join at this time.";
    if (first.shape.empty()) {
      msg << "Process-set rank zero tried to " << kindName(kind) << " a rank-zero tensor.";
      return msg.str();
    }
    int64_t elements = 1;
    for (auto d : first.shape) elements *= d;
    int64_t bytes = elements * static_cast<int64_t>(dataTypeSize(first.params.dtype));
    if (first.params.prescale != 1.0 && bytes > ctx.fusionThreshold) {
      msg << "Reducescatter with prescale_factor == " << first.params.prescale
          << " != 1.0: The fusion buffer is not large enough to hold the input tensor (" << bytes
          << " bytes); increase HOROVOD_FUSION_THRESHOLD.";
      return msg.str();
    }
  }
  if (kind == Kind::kBroadcast) {
    if (ctx.joinedCount > 0) return "Broadcast is not supported with Join at this time.";
    for (size_t i = 1; i < n; ++i) {
      if (requests[i].params.root != first.params.root) {
        msg << "Mismatched " << kindName(kind) << " root ranks: One rank specified root rank " << first.params.root
            << ", but another rank specified root rank " << requests[i].params.root << ".";
        return msg.str() + sides(requests, ctx, [](const Request& q) { return "root " + std::to_string(q.params.root); });
      }
    }
  }
  bool firstCpu = first.params.device == kCpuDevice;
  for (size_t i = 1; i < n; ++i) {
    bool cpu = requests[i].params.device == kCpuDevice;
    if (cpu != firstCpu) {
      msg << "Mismatched " << kindName(kind) << " CPU/GPU device selection: One rank specified device "
          << (firstCpu ? "CPU" : "GPU") << ", but another rank specified device " << (cpu ? "CPU" : "GPU") << ".";
      return msg.str() + sides(requests, ctx, [](const Request& q) {
               return std::string(q.params.device == kCpuDevice ? "CPU" : "GPU");
             });
    }
  }
  if (kind == Kind::kAddProcessSet || kind == Kind::kRemoveProcessSet) {
    for (size_t i = 1; i < n; ++i) {
      if (requests[i].splits != first.splits) {
        return kind == Kind::kAddProcessSet
                   ? "Mismatched add_process_set: ranks called it with different rank lists."
                   : "Mismatched remove_process_set: ranks called it with different process set ids.";
      }
    }
  }
  // Beyond Horovod's table: checks whose failure would otherwise surface only at execution.
  if (kind == Kind::kAdasum) return "Adasum is not supported yet";
  if (isReduction(kind) && !scalable(first.params.dtype) &&
      (first.params.prescale != 1.0 || first.params.postscale != 1.0 || first.params.op == ReduceOp::kAverage)) {
    msg << "Type " << dataTypeName(first.params.dtype) << " not supported by ScaleBufferCPUImpl.";
    return msg.str();
  }
  if (kind == Kind::kAlltoall) {
    size_t setSize = ctx.setRanks->size();
    for (const auto& r : requests) {
      if (r.splits.size() != setSize) return "Number of entries in splits does not equal number of workers.";
    }
  }
  return "";
}

}  // namespace

std::string mismatchMessage(const std::vector<Request>& requests, const NegotiationContext& context) {
  return validate(requests, context);
}

bool conflicting(const Request& a, const Request& b) {
  if (a.params.kind != b.params.kind || a.params.dtype != b.params.dtype) return true;
  if ((a.params.device == kCpuDevice) != (b.params.device == kCpuDevice)) return true;
  const Kind kind = a.params.kind;
  if ((isReduction(kind) || kind == Kind::kBroadcast) && a.shape != b.shape) return true;
  if (isReduction(kind) && (a.params.prescale != b.params.prescale || a.params.postscale != b.params.postscale)) return true;
  if (kind == Kind::kAllreduce && a.params.op != b.params.op) return true;
  if (kind == Kind::kBroadcast && a.params.root != b.params.root) return true;
  if (kind == Kind::kAllgather || kind == Kind::kAlltoall) {
    if (a.shape.size() != b.shape.size()) return true;
    for (size_t d = 1; d < a.shape.size(); ++d) {
      if (a.shape[d] != b.shape[d]) return true;
    }
  }
  return false;
}

int setIndexOf(const std::vector<int>& setRanks, int globalRank) {
  auto it = std::lower_bound(setRanks.begin(), setRanks.end(), globalRank);
  if (it == setRanks.end() || *it != globalRank) return -1;
  return static_cast<int>(it - setRanks.begin());
}

Response constructResponse(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  const Request& first = requests[0];
  std::string error = validate(requests, ctx);
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
