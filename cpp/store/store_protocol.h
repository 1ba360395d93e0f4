// Wire format between TcpStore (client) and TcpStoreServer, after the handshake of
// common/hmac.h. Every message is a frame: u32 body length (little-endian) | body.
//
//   request  body: u8 op | fields              response body: u8 status | fields
//   kSet   str key, bytes value                kOk       (get: bytes value; add: i64 value)
//   kGet   u64 timeoutMs, str key              kTimeout  u32 n, str missing keys...
//   kAdd   str key, i64 delta                  kError    str message
//   kWait  u64 timeoutMs, u32 n, str keys...
// str/bytes are u32 length | bytes. timeoutMs == kNoTimeout means no deadline. A client sends
// one request at a time per connection and waits for its response; get and wait block on the
// server until the keys exist or the timeout passes, so clients never poll.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hvd::store_wire {

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4 };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

constexpr uint64_t kNoTimeout = ~uint64_t{0};
constexpr uint32_t kMaxFrameBytes = 1u << 30;
constexpr size_t kHeaderBytes = 4;

// Appends fields to a frame; finish() patches the length header.
class Writer {
 public:
  Writer() : buffer_(kHeaderBytes, 0) {}
  Writer& u8(uint8_t v) {
    buffer_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v) { return raw(&v, 4); }
  Writer& u64(uint64_t v) { return raw(&v, 8); }
  Writer& i64(int64_t v) { return raw(&v, 8); }
  Writer& str(const void* data, size_t bytes) {
    u32(static_cast<uint32_t>(bytes));
    return raw(data, bytes);
  }
  Writer& str(const std::string& s) { return str(s.data(), s.size()); }
  std::vector<uint8_t>& finish() {
    uint32_t body = static_cast<uint32_t>(buffer_.size() - kHeaderBytes);
    std::memcpy(buffer_.data(), &body, 4);  // x86-64 and aarch64 Linux: little-endian
    return buffer_;
  }

 private:
  Writer& raw(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    buffer_.insert(buffer_.end(), p, p + bytes);
    return *this;
  }
  std::vector<uint8_t> buffer_;
};

// Reads fields from a frame body; any overrun sets ok() to false and returns zeros.
class Reader {
 public:
  Reader(const uint8_t* data, size_t bytes) : p_(data), end_(data + bytes) {}
  bool ok() const { return ok_; }
  bool atEnd() const { return p_ == end_; }
  uint8_t u8() {
    uint8_t v = 0;
    raw(&v, 1);
    return v;
  }
  uint32_t u32() {
    uint32_t v = 0;
    raw(&v, 4);
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    raw(&v, 8);
    return v;
  }
  int64_t i64() {
    int64_t v = 0;
    raw(&v, 8);
    return v;
  }
  std::string str() {
    uint32_t n = u32();
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<uint8_t> bytes() {
    uint32_t n = u32();
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return {};
    }
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }

 private:
  void raw(void* out, size_t n) {
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
      ok_ = false;
      return;
    }
    std::memcpy(out, p_, n);
    p_ += n;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

inline uint32_t frameLength(const uint8_t* header) {
  uint32_t n;
  std::memcpy(&n, header, 4);
  return n;
}

// Identities used in the handshake (store connections are not rank-specific).
inline constexpr const char* kClientIdentity = "horovod-store-client";
inline constexpr const char* kServerIdentity = "horovod-store-server";

}  // namespace hvd::store_wire
