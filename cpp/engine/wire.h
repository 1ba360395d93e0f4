// Compact binary encoding for control-plane messages: little-endian fixed-width integers,
// LEB128 varints, length-prefixed strings. Internal to the engine; both ends run the same build.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "horovod/errors.h"

namespace hvd::engine {

class WireWriter {
 public:
  explicit WireWriter(std::vector<uint8_t>& out) : out_(out) {}

  void u8(uint8_t v) { out_.push_back(v); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<uint8_t>(v));
  }
  // Zigzag for signed values.
  void svarint(int64_t v) { varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void f64(double v) {
    uint8_t bytes[8];
    std::memcpy(bytes, &v, 8);
    out_.insert(out_.end(), bytes, bytes + 8);
  }
  void str(const std::string& s) {
    varint(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  // Appends n zero bytes and returns where they start (valid until the next write).
  uint8_t* zeros(size_t n) {
    size_t at = out_.size();
    out_.resize(at + n, 0);
    return out_.data() + at;
  }
  void raw(const void* data, size_t n) {
    auto p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  template <typename T>
  void svarints(const std::vector<T>& values) {
    varint(values.size());
    for (auto v : values) svarint(static_cast<int64_t>(v));
  }

 private:
  std::vector<uint8_t>& out_;
};

class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool done() const { return p_ == end_; }
  uint8_t u8() {
    need(1);
    return *p_++;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = u8();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw Error("engine wire: malformed varint");
  }
  int64_t svarint() {
    uint64_t v = varint();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  double f64() {
    need(8);
    double v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  std::string str() {
    size_t n = count();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  const uint8_t* raw(size_t n) {
    need(n);
    const uint8_t* p = p_;
    p_ += n;
    return p;
  }
  template <typename T>
  void svarints(std::vector<T>& out) {
    size_t n = count();
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(svarint());
  }
  // A length prefix, sanity-checked against the bytes left (every element takes >= 1 byte).
  size_t count() {
    uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) throw Error("engine wire: length exceeds message");
    return static_cast<size_t>(n);
  }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) throw Error("engine wire: truncated message");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace hvd::engine
