// The engine's control messages as a peer could send them (engine/message.h): any bytes either
// decode or throw DecodeError; what decodes re-encodes to a canonical form that decodes and
// re-encodes to the same bytes.
#include <vector>

#include "common/byte_codec.h"
#include "engine/message.h"
#include "fuzz_target.h"

using namespace hvd;
using namespace hvd::engine;

namespace {

template <typename Decode>
void roundTrip(const std::vector<uint8_t>& bytes, Decode decode) {
  std::vector<uint8_t> once, twice;
  encode(decode(bytes), once);
  encode(decode(once), twice);
  HVD_FUZZ_CHECK(once == twice);
}

}  // namespace

HVD_FUZZ_TARGET(engine_messages) {
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    switch (messageType(bytes)) {
      case MessageType::kRequests: roundTrip(bytes, decodeRequestList); break;
      case MessageType::kResponses: roundTrip(bytes, decodeResponseList); break;
      case MessageType::kAbort: {
        roundTrip(bytes, decodeErrorInfo);
        // The notice becomes the exception the receiving rank raises.
        ErrorInfo info = decodeErrorInfo(bytes);
        ErrorInfo back = ErrorInfo::fromException(info.toException());
        // (what() is a C string: a message ends at its first NUL byte.)
        HVD_FUZZ_CHECK(back.message == info.message.substr(0, info.message.find('\0')));
        HVD_FUZZ_CHECK(back.kind == info.kind && back.relayedFrom == info.relayedFrom);
        break;
      }
      default: break;  // the engine ignores unknown types
    }
  } catch (const DecodeError&) {
  }
  return 0;
}
