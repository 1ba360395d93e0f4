// The TCP transport's control-plane framing (no I/O): u32 payload length (little-endian) | u8
// kind | payload. The parser takes bytes as a peer sent them, so every length and kind is checked
// before it is used; tcp_mailbox.cc reads the connection and hands the buffered bytes here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace hvd::tcp::control_frame {

constexpr uint8_t kMessage = 1;
constexpr uint8_t kGoodbye = 2;
constexpr uint8_t kAbort = 3;  // i32 blamed rank (-1 none) | reason text
constexpr uint8_t kPing = 4;
constexpr uint8_t kPong = 5;
constexpr size_t kHeaderBytes = 5;
constexpr uint32_t kMaxPayloadBytes = 1u << 30;

struct Frame {
  uint8_t kind = 0;
  const uint8_t* payload = nullptr;  // into the parsed buffer
  uint32_t length = 0;
};

enum class Parse { kNeedMore, kFrame, kMalformed };

// Parses the frame at the start of `bytes` (`avail` of them). kFrame fills `out` (the frame takes
// kHeaderBytes + out.length bytes); kNeedMore: the header or the payload is incomplete;
// kMalformed: an unknown kind or a length above kMaxPayloadBytes (known from the header alone,
// before any payload is buffered).
inline Parse parse(const uint8_t* bytes, size_t avail, Frame& out) {
  if (avail < kHeaderBytes) return Parse::kNeedMore;
  uint32_t length;
  std::memcpy(&length, bytes, 4);
  uint8_t kind = bytes[4];
  if (length > kMaxPayloadBytes || kind < kMessage || kind > kPong) return Parse::kMalformed;
  if (avail - kHeaderBytes < length) return Parse::kNeedMore;
  out = Frame{kind, bytes + kHeaderBytes, length};
  return Parse::kFrame;
}

// An abort frame's payload: the rank the sender blames (-1 when none or not a rank of a job of
// `worldSize`) and its reason ("no reason given" when empty).
struct AbortNotice {
  int blamed = -1;
  std::string reason;
};
inline AbortNotice decodeAbort(const uint8_t* payload, uint32_t length, int worldSize) {
  AbortNotice notice;
  int32_t blamed = -1;
  if (length >= sizeof(blamed)) std::memcpy(&blamed, payload, sizeof(blamed));
  notice.blamed = blamed >= 0 && blamed < worldSize ? blamed : -1;
  notice.reason = length > sizeof(blamed)
                      ? std::string(reinterpret_cast<const char*>(payload) + sizeof(blamed), length - sizeof(blamed))
                      : std::string("no reason given");
  return notice;
}

}  // namespace hvd::tcp::control_frame
