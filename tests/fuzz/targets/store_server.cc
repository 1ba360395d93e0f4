// The rendezvous server's side of the store protocol (store/store_protocol.h): a request body
// as an authenticated client could send it decodes or is refused with the message the server
// answers, and an add on any stored value either succeeds or fails cleanly (no overflow).
#include <string>

#include "common/byte_codec.h"
#include "fuzz_target.h"
#include "horovod/errors.h"
#include "store/store_protocol.h"
#include "store/store_util.h"

using namespace hvd;

HVD_FUZZ_TARGET(store_server) {
  store_wire::Request q;
  try {
    q = store_wire::decodeRequest(data, size);
  } catch (const DecodeError& e) {
    const std::string why = e.what();
    HVD_FUZZ_CHECK(why.rfind("malformed ", 0) == 0 || why.rfind("unknown request ", 0) == 0);
    return 0;
  }
  if (q.op == store_wire::Op::kAdd) {
    // The value a counter key may hold is anything a client set: use the key's bytes as one.
    try {
      int64_t current = store_detail::parseCounter(q.key, Bytes(q.key.begin(), q.key.end()));
      store_detail::formatCounter(store_detail::addToCounter(q.key, current, q.delta));
    } catch (const StoreError&) {
    }
  }
  return 0;
}
