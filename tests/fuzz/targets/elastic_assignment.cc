// The elastic protocol's values (store/elastic_protocol.h) as a worker reads them from the
// rendezvous store: an assignment decodes into a placement that makes sense or throws
// hvd::Error naming it, and what decodes re-encodes to text that decodes the same.
#include <string>

#include "fuzz_target.h"
#include "horovod/errors.h"
#include "store/elastic_protocol.h"

using namespace hvd;

HVD_FUZZ_TARGET(elastic_assignment) {
  const std::string text(fuzz::text(data, size));
  elastic::Assignment a;
  try {
    a = elastic::decodeAssignment(text);
  } catch (const Error&) {
    return 0;
  }
  if (a.kind == elastic::Assignment::Kind::kJoin) {
    HVD_FUZZ_CHECK(a.placement.size > 0 && a.placement.rank >= 0 && a.placement.rank < a.placement.size);
  }
  elastic::Assignment b = elastic::decodeAssignment(elastic::encodeAssignment(a));
  HVD_FUZZ_CHECK(b.kind == a.kind && b.round == a.round && b.updatesSeen == a.updatesSeen);
  HVD_FUZZ_CHECK(b.placement.rank == a.placement.rank && b.placement.size == a.placement.size);
  return 0;
}
