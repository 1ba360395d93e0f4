// Wire format between TcpStore (client) and TcpStoreServer, after the handshake of
// common/hmac.h. Every message is a frame: u32 body length (little-endian) | body.
//
//   request  body: u8 op | fields              response body: u8 status | fields
//   kSet   str key, bytes value                kOk       (get: bytes value; add: i64 value)
//   kGet   u64 timeoutMs, str key              kTimeout  u32 n, str missing keys...
//   kAdd   str key, i64 delta                  kError    str message
//   kWait  u64 timeoutMs, u32 n, str keys...
// str/bytes are u32 length | bytes (ByteWriter::str32), integers little-endian. timeoutMs ==
// kNoTimeout means no deadline. A client sends one request at a time per connection and waits
// for its response; get and wait block on the server until the keys exist or the timeout passes,
// so clients never poll.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/byte_codec.h"

namespace hvd::store_wire {

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4 };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

constexpr uint64_t kNoTimeout = ~uint64_t{0};
constexpr uint32_t kMaxFrameBytes = 1u << 30;
constexpr size_t kHeaderBytes = 4;

// A frame under construction: fields go through body() (str/bytes with str32), finish() fills
// in the length header. Holds its buffer, so it is neither copied nor moved.
class Writer {
 public:
  Writer() : frame_(kHeaderBytes, 0), body_(frame_) {}
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  ByteWriter& body() { return body_; }
  std::vector<uint8_t>& finish() {
    uint32_t length = static_cast<uint32_t>(frame_.size() - kHeaderBytes);
    std::memcpy(frame_.data(), &length, 4);
    return frame_;
  }

 private:
  std::vector<uint8_t> frame_;
  ByteWriter body_;
};

// Reads a frame body; a malformed one throws DecodeError.
inline ByteReader reader(const uint8_t* body, size_t bytes) { return ByteReader(body, bytes, "store message"); }

inline uint32_t frameLength(const uint8_t* header) {
  uint32_t n;
  std::memcpy(&n, header, 4);
  return n;
}

// A decoded request (server side). Only the fields of its op are set.
struct Request {
  Op op = Op::kSet;
  std::string key;                // set, get, add
  std::vector<uint8_t> value;     // set
  int64_t delta = 0;              // add
  uint64_t timeoutMs = 0;         // get, wait
  std::vector<std::string> keys;  // wait
};
// Decodes a request body. Throws DecodeError "malformed <op> request" or "unknown request <n>",
// the message the server answers with.
Request decodeRequest(const uint8_t* body, size_t bytes);

// Client side: checks a response's status. Returns a reader positioned after it when kOk;
// throws Timeout (kTimeout, naming the missing keys) or StoreError (kError with the server's
// message, an unknown status, a malformed body). `op` and `where` name the request and server.
ByteReader checkResponse(const std::vector<uint8_t>& body, const std::string& op, const std::string& where);
// The value of a get's / add's kOk response (after checkResponse). Throws StoreError if malformed.
std::vector<uint8_t> readGetValue(ByteReader& r, const std::string& where);
int64_t readAddValue(ByteReader& r, const std::string& where);

// Identities used in the handshake (store connections are not rank-specific).
inline constexpr const char* kClientIdentity = "horovod-store-client";
inline constexpr const char* kServerIdentity = "horovod-store-server";

}  // namespace hvd::store_wire
