// The checks negotiation runs over all requests for one name, as a table (negotiation_rules.cc):
// one row per rule, in Horovod's order. Each rule runs over all requests before the next, and the
// first rule that fails gives the message.
#pragma once

#include <string>
#include <vector>

#include "engine/negotiation.h"

namespace hvd::engine {

// The first failing rule's message for these requests (requests[0] is the reference the others
// are compared with), or "" when every rule passes.
std::string firstMismatch(const std::vector<Request>& requests, const NegotiationContext& context);

// Whether the rules that compare two requests (data type, operation, shape, scale factors,
// reduction operator, root, device) find that `b` disagrees with `a`, taking `a`'s kind.
bool pairDisagrees(const Request& a, const Request& b);

}  // namespace hvd::engine
