#include "common/byte_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace hvd {
namespace {

TEST(ByteCodec, RoundTrip) {
  std::vector<uint8_t> bytes;
  ByteWriter w(bytes);
  w.u8(7).u32(0xdeadbeef).u64(~uint64_t{0}).i64(-5).f64(0.25);
  w.varint(300).svarint(-300).svarint(std::numeric_limits<int64_t>::min());
  w.str("name").str32("key").str32("");
  w.svarints(std::vector<int32_t>{-1, 0, 1 << 20});

  ByteReader r(bytes.data(), bytes.size(), "test input");
  EXPECT_EQ(r.u8(), 7);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.u64(), ~uint64_t{0});
  EXPECT_EQ(r.i64(), -5);
  EXPECT_EQ(r.f64(), 0.25);
  EXPECT_EQ(r.varint(), 300u);
  EXPECT_EQ(r.svarint(), -300);
  EXPECT_EQ(r.svarint(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(r.str(), "name");
  EXPECT_EQ(r.str32(), "key");
  EXPECT_EQ(r.bytes32(), std::vector<uint8_t>{});
  std::vector<int32_t> values;
  r.svarints(values);
  EXPECT_EQ(values, (std::vector<int32_t>{-1, 0, 1 << 20}));
  EXPECT_TRUE(r.atEnd());
}

// The store protocol relies on this layout: little-endian fixed widths, u32 string lengths.
TEST(ByteCodec, FixedWidthLayout) {
  std::vector<uint8_t> bytes;
  ByteWriter(bytes).u32(0x01020304).str32("ab");
  EXPECT_EQ(bytes, (std::vector<uint8_t>{4, 3, 2, 1, 2, 0, 0, 0, 'a', 'b'}));
}

TEST(ByteCodec, MalformedInputThrowsDecodeError) {
  std::vector<uint8_t> bytes;
  ByteWriter(bytes).str32("abcdef");
  bytes.pop_back();
  ByteReader truncated(bytes.data(), bytes.size(), "test input");
  try {
    truncated.str32();
    FAIL() << "no DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("test input: truncated", 0), 0u) << e.what();
  }

  // A varint length larger than what is left is refused before anything is allocated.
  bytes.clear();
  ByteWriter(bytes).varint(uint64_t{1} << 40);
  ByteReader tooLong(bytes.data(), bytes.size(), "test input");
  EXPECT_THROW(tooLong.str(), DecodeError);

  const std::vector<uint8_t> endless(11, 0xff);
  ByteReader varint(endless.data(), endless.size(), "test input");
  EXPECT_THROW(varint.varint(), DecodeError);
}

}  // namespace
}  // namespace hvd
