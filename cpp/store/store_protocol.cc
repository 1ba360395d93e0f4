#include "store/store_protocol.h"

#include <iterator>

#include "horovod/errors.h"
#include "store/store_util.h"

namespace hvd::store_wire {

Request decodeRequest(const uint8_t* body, size_t bytes) {
  ByteReader r = reader(body, bytes);
  Request q;
  uint8_t op = 0;
  try {
    op = r.u8();
    q.op = static_cast<Op>(op);
    switch (q.op) {
      case Op::kSet:
        q.key = r.str32();
        q.value = r.bytes32();
        return q;
      case Op::kAdd:
        q.key = r.str32();
        q.delta = r.i64();
        return q;
      case Op::kGet:
        q.timeoutMs = r.u64();
        q.key = r.str32();
        return q;
      case Op::kWait: {
        q.timeoutMs = r.u64();
        uint32_t n = r.u32();
        // Each key takes at least its 4-byte length: a count the body cannot hold is malformed
        // before anything is allocated for it.
        if (n > r.left() / 4) throw DecodeError("store message: key count exceeds the body");
        q.keys.reserve(n);
        for (; n > 0; --n) q.keys.push_back(r.str32());
        return q;
      }
    }
  } catch (const DecodeError&) {
    static constexpr const char* kNames[] = {"", "set", "get", "add", "wait"};
    throw DecodeError(std::string("malformed ") + (op < std::size(kNames) ? kNames[op] : "") + " request");
  }
  throw DecodeError("unknown request " + std::to_string(op));
}

ByteReader checkResponse(const std::vector<uint8_t>& body, const std::string& op, const std::string& where) {
  ByteReader r = reader(body.data(), body.size());
  try {
    auto status = static_cast<Status>(r.u8());
    if (status == Status::kOk) return r;
    if (status == Status::kTimeout) {
      uint32_t n = r.u32();
      if (n > r.left() / 4) throw DecodeError("store message: key count exceeds the body");
      std::vector<std::string> missing;
      missing.reserve(n);
      for (; n > 0; --n) missing.push_back(r.str32());
      throw Timeout(store_detail::timeoutMessage(op, missing, "rendezvous server at " + where));
    }
    if (status == Status::kError) throw StoreError("rendezvous server at " + where + ": " + r.str32());
  } catch (const DecodeError&) {
    throw StoreError("malformed " + op + " response from rendezvous server at " + where);
  }
  throw StoreError("rendezvous server at " + where + " sent an unknown status");
}

std::vector<uint8_t> readGetValue(ByteReader& r, const std::string& where) {
  try {
    return r.bytes32();
  } catch (const DecodeError&) {
    throw StoreError("malformed get response from rendezvous server at " + where);
  }
}

int64_t readAddValue(ByteReader& r, const std::string& where) {
  try {
    return r.i64();
  } catch (const DecodeError&) {
    throw StoreError("malformed add response from rendezvous server at " + where);
  }
}

}  // namespace hvd::store_wire
