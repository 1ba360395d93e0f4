// Negotiation: turning the requests that every rank made for one name into one Response.
// Pure functions, run by the coordinator; the checks and messages are Horovod's:
// each check runs over all requests before the next check, and the first mismatch wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/message.h"

namespace hvd::engine {

struct NegotiationContext {
  const std::vector<int>* setRanks = nullptr;  // ascending global ranks of the process set
  int joinedCount = 0;                         // ranks joined (global set only)
  int64_t fusionThreshold = 0;
};

// `requests` are all requests for one (process set, name), requests[0] being the first one the
// coordinator saw. Returns a response of the requests' kind, or a kError response carrying the
// mismatch message (tensors[0].name set in both cases).
Response constructResponse(const std::vector<Request>& requests, const NegotiationContext& context);

// The mismatch constructResponse would report for these requests ("" when they agree); each
// message names which ranks asked for what, and the members that have not submitted yet.
// Works on a subset of the members' requests too (the coordinator checks as they arrive).
std::string mismatchMessage(const std::vector<Request>& requests, const NegotiationContext& context);

// Whether two requests for one name disagree on something every rank must agree on (op, dtype,
// device kind, root, shape where it must match, scale factors, reduction op): a mismatch already,
// whatever the other ranks send. A cheap test, run on every request that joins a pending name.
bool conflicting(const Request& a, const Request& b);

// Index of `globalRank` in the sorted member list, or -1.
int setIndexOf(const std::vector<int>& setRanks, int globalRank);

// Bytes a response occupies in the fusion buffer (all ranks' rows for allgather).
int64_t fusionBytes(const Response& response);
// The same for one tensor of a response of this kind and dtype.
int64_t fusionBytes(Kind kind, DataType dtype, const TensorInfo& tensor);

}  // namespace hvd::engine
