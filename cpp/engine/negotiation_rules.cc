#include "engine/negotiation_rules.h"

#include <algorithm>
#include <sstream>

#include "collectives/adasum.h"

namespace hvd::engine {
namespace {

// ---- the kinds a rule applies to ----------------------------------------------------------------

bool isReduction(Kind k) { return k == Kind::kAllreduce || k == Kind::kAdasum || k == Kind::kReducescatter; }
bool anyKind(Kind) { return true; }
bool reductionOrBroadcast(Kind k) { return isReduction(k) || k == Kind::kBroadcast; }
bool allreduceOnly(Kind k) { return k == Kind::kAllreduce; }
bool gathering(Kind k) { return k == Kind::kAllgather || k == Kind::kAlltoall; }
bool gatheringOrReducescatter(Kind k) { return gathering(k) || k == Kind::kReducescatter; }
bool notWithJoin(Kind k) { return gatheringOrReducescatter(k) || k == Kind::kBroadcast; }
bool reducescatterOnly(Kind k) { return k == Kind::kReducescatter; }
bool broadcastOnly(Kind k) { return k == Kind::kBroadcast; }
bool processSetChange(Kind k) { return k == Kind::kAddProcessSet || k == Kind::kRemoveProcessSet; }
bool adasumOnly(Kind k) { return k == Kind::kAdasum; }
bool alltoallOnly(Kind k) { return k == Kind::kAlltoall; }

// ---- helpers of the messages ---------------------------------------------------------------------

// The op as the frameworks name it (hvd.Sum, hvd.Average, ...), with its number for an op this
// build does not know.
std::string reduceOpLabel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kAdasum: return "Adasum";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
  }
  return "op " + std::to_string(static_cast<int>(op));
}

// Horovod scales on the CPU only for these types ("not supported by ScaleBufferCPUImpl").
bool scalable(DataType t) { return t != DataType::kUInt16 && t != DataType::kInt16 && t != DataType::kBool; }

bool onCpu(const Request& q) { return q.params.device == kCpuDevice; }
const char* deviceLabel(bool cpu) { return cpu ? "CPU" : "GPU"; }

std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

using Label = std::string (*)(const Request&);

// Which ranks asked for what: " (ALLREDUCE: rank 0; ALLGATHER: ranks 1, 2; not submitted yet:
// rank 3)", grouping the requests by label(request) in order of first appearance; the members
// of the process set with no request yet (joined ranks aside) come last.
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

// The first dimension past the 0th where two shapes of equal rank differ, or 0 when none does.
size_t differingRowDim(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  for (size_t d = 1; d < a.size(); ++d) {
    if (a[d] != b[d]) return d;
  }
  return 0;
}

// ---- the rules -----------------------------------------------------------------------------------

// A rule compares each request with the first (`differs`; the first differing one is described
// by `describe`, followed by the sides grouped by `label` unless it is null), or judges all the
// requests at once (`verdict`: the message, "" when they pass). Exactly one of `differs` and
// `verdict` is set.
struct Rule {
  const char* checks;        // what the rule checks, for the reader
  bool (*appliesTo)(Kind);   // the first request's kind
  bool (*differs)(const Request& first, const Request& other);
  void (*describe)(std::ostream& msg, const Request& first, const Request& other);
  Label label;
  std::string (*verdict)(const std::vector<Request>& requests, const NegotiationContext& ctx);
};

const Request& firstOf(const std::vector<Request>& requests) { return requests[0]; }
Kind kindOf(const Request& q) { return q.params.kind; }

std::string joinUnsupported(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  if (ctx.joinedCount <= 0) return "";
  switch (kindOf(firstOf(requests))) {
    case Kind::kAllgather:
      return "Allgather is not supported with Join at this time. Specify sparse_to_dense=True if using "
             "DistributedOptimizer";
    case Kind::kAlltoall: return "Alltoall is not supported with Join at this time.";
    case Kind::kReducescatter: return "Reducescatter is not supported with Join at this time.";
    default: return "Broadcast is not supported with Join at this time.";
  }
}

std::string rankZeroTensor(const std::vector<Request>& requests, const NegotiationContext&) {
  const Request& first = firstOf(requests);
  if (!first.shape.empty()) return "";
  return "Process-set rank zero tried to " + std::string(kindName(kindOf(first))) + " a rank-zero tensor.";
}

std::string prescaleNeedsFusionBuffer(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  const Request& first = firstOf(requests);
  int64_t elements = 1;
  for (auto d : first.shape) elements *= d;
  const int64_t bytes = elements * static_cast<int64_t>(dataTypeSize(first.params.dtype));
  if (first.params.prescale == 1.0 || bytes <= ctx.fusionThreshold) return "";
  std::ostringstream msg;
  msg << "Reducescatter with prescale_factor == " << first.params.prescale
      << " != 1.0: The fusion buffer is not large enough to hold the input tensor (" << bytes
      << " bytes); increase HOROVOD_FUSION_THRESHOLD.";
  return msg.str();
}

std::string processSetListsDiffer(const std::vector<Request>& requests, const NegotiationContext&) {
  const Request& first = firstOf(requests);
  for (const auto& q : requests) {
    if (q.splits != first.splits) {
      return kindOf(first) == Kind::kAddProcessSet
                 ? "Mismatched add_process_set: ranks called it with different rank lists."
                 : "Mismatched remove_process_set: ranks called it with different process set ids.";
    }
  }
  return "";
}

// What the Adasum algorithm (collectives/adasum.h) cannot run: other dtypes, and sets whose size
// is not a power of two (Horovod's refusal; extra ranks are not folded in). GPU tensors run the
// hierarchical Adasum (collectives/adasum_hosts.h), whose condition is on hosts, not ranks: the
// GPU backends refuse it from the set's host layout, alike on every member.
std::string adasumUnsupported(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  const Request& first = firstOf(requests);
  if (!collectives::adasumTypeSupported(first.params.dtype)) {
    return "Adasum reduces only float16, bfloat16, float32 and float64 tensors; tensor " + first.name + " is " +
           std::string(dataTypeName(first.params.dtype)) + ".";
  }
  const int size = ctx.setRanks != nullptr ? static_cast<int>(ctx.setRanks->size()) : 1;
  if (onCpu(first) && !collectives::adasumRankCountSupported(size)) {
    return "Running Adasum with non-power of 2 ranks is not supported yet (process set " +
           std::to_string(first.params.processSet) + " has " + std::to_string(size) + " ranks).";
  }
  return "";
}

std::string unscalableType(const std::vector<Request>& requests, const NegotiationContext&) {
  const OpParams& p = firstOf(requests).params;
  if (scalable(p.dtype) || (p.prescale == 1.0 && p.postscale == 1.0 && p.op != ReduceOp::kAverage)) return "";
  return "Type " + std::string(dataTypeName(p.dtype)) + " not supported by ScaleBufferCPUImpl.";
}

std::string splitsPerWorker(const std::vector<Request>& requests, const NegotiationContext& ctx) {
  const size_t setSize = ctx.setRanks->size();
  for (const auto& q : requests) {
    if (q.splits.size() != setSize) return "Number of entries in splits does not equal number of workers.";
  }
  return "";
}

std::string shapeLabel(const Request& q) { return shapeString(q.shape); }

// Horovod's checks and messages, in Horovod's order; after the device rule, checks beyond
// Horovod's table whose failure would otherwise surface only at execution.
const Rule kRules[] = {
    {"data type", anyKind, [](const Request& a, const Request& b) { return a.params.dtype != b.params.dtype; },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched data types: One rank had type " << dataTypeName(a.params.dtype)
           << ", but another rank had type " << dataTypeName(b.params.dtype) << ".";
     },
     [](const Request& q) { return std::string(dataTypeName(q.params.dtype)); }, nullptr},
    {"operation", anyKind, [](const Request& a, const Request& b) { return a.params.kind != b.params.kind; },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched operations: One rank did an " << kindName(a.params.kind) << ", but another rank did an "
           << kindName(b.params.kind) << ".";
     },
     [](const Request& q) { return std::string(kindName(q.params.kind)); }, nullptr},
    {"shape (reductions, broadcast)", reductionOrBroadcast,
     [](const Request& a, const Request& b) { return a.shape != b.shape; },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched " << kindName(a.params.kind) << " tensor shapes: One rank sent a tensor of shape "
           << shapeString(a.shape) << ", but another rank sent a tensor of shape " << shapeString(b.shape) << ".";
     },
     shapeLabel, nullptr},
    {"prescale and postscale factors", isReduction,
     [](const Request& a, const Request& b) {
       return a.params.prescale != b.params.prescale || a.params.postscale != b.params.postscale;
     },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched prescale and/or postscale factors: One rank sent factors (" << a.params.prescale << ", "
           << a.params.postscale << "), but another rank sent factors (" << b.params.prescale << ", "
           << b.params.postscale << ").";
     },
     [](const Request& q) {
       std::ostringstream f;
       f << "(" << q.params.prescale << ", " << q.params.postscale << ")";
       return f.str();
     },
     nullptr},
    {"reduction operator", allreduceOnly, [](const Request& a, const Request& b) { return a.params.op != b.params.op; },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched reduction operation: One rank sent reduction op " << reduceOpLabel(a.params.op)
           << ", but another rank sent reduction op " << reduceOpLabel(b.params.op) << ".";
     },
     [](const Request& q) { return reduceOpLabel(q.params.op); }, nullptr},
    {"no ranks joined", notWithJoin, nullptr, nullptr, nullptr, joinUnsupported},
    {"a tensor of rank > 0", gatheringOrReducescatter, nullptr, nullptr, nullptr, rankZeroTensor},
    {"tensor rank and every dimension but the first", gathering,
     [](const Request& a, const Request& b) {
       return a.shape.size() != b.shape.size() || differingRowDim(a.shape, b.shape) != 0;
     },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched " << kindName(a.params.kind) << " tensor shapes: ";
       if (a.shape.size() != b.shape.size()) {
         msg << "One rank sent a tensor of rank " << a.shape.size() << ", but another rank sent a tensor of rank "
             << b.shape.size() << ".";
         return;
       }
       const size_t d = differingRowDim(a.shape, b.shape);
       msg << "One rank sent a tensor with dimension " << d << " equal to " << a.shape[d]
           << ", but another rank sent a tensor with dimension " << d << " equal to " << b.shape[d] << ".";
     },
     shapeLabel, nullptr},
    {"prescaled input fits the fusion buffer", reducescatterOnly, nullptr, nullptr, nullptr, prescaleNeedsFusionBuffer},
    {"root rank", broadcastOnly, [](const Request& a, const Request& b) { return a.params.root != b.params.root; },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched " << kindName(a.params.kind) << " root ranks: One rank specified root rank " << a.params.root
           << ", but another rank specified root rank " << b.params.root << ".";
     },
     [](const Request& q) { return "root " + std::to_string(q.params.root); }, nullptr},
    {"CPU or GPU", anyKind, [](const Request& a, const Request& b) { return onCpu(a) != onCpu(b); },
     [](std::ostream& msg, const Request& a, const Request& b) {
       msg << "Mismatched " << kindName(a.params.kind) << " CPU/GPU device selection: One rank specified device "
           << deviceLabel(onCpu(a)) << ", but another rank specified device " << deviceLabel(onCpu(b)) << ".";
     },
     [](const Request& q) { return std::string(deviceLabel(onCpu(q))); }, nullptr},
    {"process set rank lists / ids", processSetChange, nullptr, nullptr, nullptr, processSetListsDiffer},
    {"a dtype and a rank count Adasum runs on", adasumOnly, nullptr, nullptr, nullptr, adasumUnsupported},
    {"a type the CPU can scale", isReduction, nullptr, nullptr, nullptr, unscalableType},
    {"one split per member", alltoallOnly, nullptr, nullptr, nullptr, splitsPerWorker},
};

std::string runRule(const Rule& rule, const std::vector<Request>& requests, const NegotiationContext& ctx) {
  if (rule.verdict != nullptr) return rule.verdict(requests, ctx);
  const Request& first = requests[0];
  for (size_t i = 1; i < requests.size(); ++i) {
    if (!rule.differs(first, requests[i])) continue;
    std::ostringstream msg;
    rule.describe(msg, first, requests[i]);
    return msg.str() + (rule.label != nullptr ? sides(requests, ctx, rule.label) : std::string());
  }
  return "";
}

}  // namespace

std::string firstMismatch(const std::vector<Request>& requests, const NegotiationContext& context) {
  const Kind kind = requests[0].params.kind;
  for (const Rule& rule : kRules) {
    if (!rule.appliesTo(kind)) continue;
    std::string message = runRule(rule, requests, context);
    if (!message.empty()) return message;
  }
  return "";
}

bool pairDisagrees(const Request& a, const Request& b) {
  const Kind kind = a.params.kind;
  for (const Rule& rule : kRules) {
    if (rule.differs != nullptr && rule.appliesTo(kind) && rule.differs(a, b)) return true;
  }
  return false;
}

}  // namespace hvd::engine
