// The byte codec of the core's wire formats (the engine's control messages, the rendezvous store
// protocol, what ranks publish at rendezvous): little-endian fixed-width integers and doubles,
// LEB128 varints (zigzag for signed values), length-prefixed strings and vectors.
//
// ByteWriter appends to a vector the caller owns (and may reuse: it allocates only when the vector
// grows). ByteReader reads a borrowed byte range, which must outlive it; every read is bounds
// checked and a malformed input throws DecodeError naming the format, so decoders read fields
// without checking each. Both are single-threaded value types with no state beyond a position.
//
// Fixed-width fields are stored in host order, which is little-endian on every platform the core
// builds for (x86-64, aarch64 Linux); the static_assert below keeps it so.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "horovod/errors.h"

namespace hvd {

static_assert(std::endian::native == std::endian::little, "the wire formats assume a little-endian host");

// Input that does not decode: truncated, or a length or varint out of range.
class DecodeError : public Error {
  using Error::Error;
};

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(&out) {}

  ByteWriter& u8(uint8_t v) {
    out_->push_back(v);
    return *this;
  }
  ByteWriter& u32(uint32_t v) { return raw(&v, sizeof v); }
  ByteWriter& u64(uint64_t v) { return raw(&v, sizeof v); }
  ByteWriter& i64(int64_t v) { return raw(&v, sizeof v); }
  ByteWriter& f64(double v) { return raw(&v, sizeof v); }
  ByteWriter& varint(uint64_t v) {
    while (v >= 0x80) {
      out_->push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_->push_back(static_cast<uint8_t>(v));
    return *this;
  }
  ByteWriter& svarint(int64_t v) { return varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  // Varint length, then the bytes.
  ByteWriter& str(std::string_view s) {
    varint(s.size());
    return raw(s.data(), s.size());
  }
  // u32 length, then the bytes (formats that frame with fixed-width lengths).
  ByteWriter& str32(const void* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    return raw(data, n);
  }
  ByteWriter& str32(std::string_view s) { return str32(s.data(), s.size()); }
  // Varint count, then each value as an svarint.
  template <typename T>
  ByteWriter& svarints(const std::vector<T>& values) {
    varint(values.size());
    for (auto v : values) svarint(static_cast<int64_t>(v));
    return *this;
  }
  ByteWriter& raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), p, p + n);
    return *this;
  }
  // Appends n zero bytes and returns where they start (valid until the next write).
  uint8_t* zeros(size_t n) {
    size_t at = out_->size();
    out_->resize(at + n, 0);
    return out_->data() + at;
  }

 private:
  std::vector<uint8_t>* out_;
};

class ByteReader {
 public:
  // `format` names the input in error messages ("engine message", ...); a string literal.
  ByteReader(const uint8_t* data, size_t size, const char* format) : p_(data), end_(data + size), format_(format) {}

  bool atEnd() const { return p_ == end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

  uint8_t u8() {
    need(1);
    return *p_++;
  }
  uint32_t u32() { return fixed<uint32_t>(); }
  uint64_t u64() { return fixed<uint64_t>(); }
  int64_t i64() { return fixed<int64_t>(); }
  double f64() { return fixed<double>(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = u8();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail("malformed varint");
  }
  int64_t svarint() {
    uint64_t v = varint();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  // What ByteWriter::str wrote.
  std::string str() {
    size_t n = count();
    return std::string(reinterpret_cast<const char*>(raw(n)), n);
  }
  // What ByteWriter::str32 wrote, as a string or as bytes.
  std::string str32() {
    size_t n = u32();
    return std::string(reinterpret_cast<const char*>(raw(n)), n);
  }
  std::vector<uint8_t> bytes32() {
    size_t n = u32();
    const uint8_t* p = raw(n);
    return std::vector<uint8_t>(p, p + n);
  }
  // What ByteWriter::svarints wrote; reuses `out`'s capacity.
  template <typename T>
  void svarints(std::vector<T>& out) {
    size_t n = count();
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(svarint());
  }
  // A varint length prefix, checked against the bytes left (every element takes >= 1 byte), so a
  // corrupt length cannot make the caller allocate more than the input could hold.
  size_t count() {
    uint64_t n = varint();
    if (n > left()) [[unlikely]] {
      fail("length " + std::to_string(n) + " exceeds the " + std::to_string(left()) + " bytes left");
    }
    return static_cast<size_t>(n);
  }
  const uint8_t* raw(size_t n) {
    need(n);
    const uint8_t* p = p_;
    p_ += n;
    return p;
  }

 private:
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, raw(sizeof v), sizeof v);
    return v;
  }
  void need(size_t n) const {
    if (left() < n) [[unlikely]]
      truncated(n);
  }
  // Out of line: the checks on the decode path stay a compare and a branch.
  [[noreturn, gnu::cold, gnu::noinline]] void truncated(size_t n) const {
    fail("truncated (" + std::to_string(n) + " more bytes needed, " + std::to_string(left()) + " left)");
  }
  [[noreturn, gnu::cold, gnu::noinline]] void fail(const std::string& what) const {
    throw DecodeError(std::string(format_) + ": " + what);
  }

  const uint8_t* p_;
  const uint8_t* end_;
  const char* format_;
};

}  // namespace hvd
