// The client's side of the store protocol (store/store_protocol.h): a response body as a
// server (or anything listening on its port that passed the handshake) could send it is
// accepted or fails with StoreError / Timeout, for every request kind.
#include <vector>

#include "fuzz_target.h"
#include "horovod/errors.h"
#include "store/store_protocol.h"

using namespace hvd;

HVD_FUZZ_TARGET(store_client) {
  const std::vector<uint8_t> body(data, data + size);
  for (const char* op : {"set", "get", "add", "wait"}) {
    try {
      ByteReader r = store_wire::checkResponse(body, op, "127.0.0.1:1");
      if (op[0] == 'g') store_wire::readGetValue(r, "127.0.0.1:1");
      if (op[0] == 'a') store_wire::readAddValue(r, "127.0.0.1:1");
    } catch (const StoreError&) {
    } catch (const Timeout&) {
    }
  }
  return 0;
}
