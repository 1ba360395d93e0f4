// The TCP transport's control-plane framing (transport/tcp/control_frame.h) over a byte stream
// as a peer could send it: frames are parsed from a buffer that grows by input-chosen chunks,
// exactly as tcp_mailbox.cc does, and every frame stays inside the bytes received.
#include <vector>

#include "fuzz_target.h"
#include "transport/tcp/control_frame.h"

using namespace hvd::tcp;

HVD_FUZZ_TARGET(tcp_control_frames) {
  if (size < 1) return 0;
  const size_t chunk = 1 + data[0] % 64;  // how much each recv() delivers
  const uint8_t* stream = data + 1;
  const size_t total = size - 1;
  std::vector<uint8_t> in;
  size_t inStart = 0;
  for (size_t fed = 0; fed < total;) {
    size_t n = std::min(chunk, total - fed);
    in.insert(in.end(), stream + fed, stream + fed + n);
    fed += n;
    control_frame::Frame frame;
    while (true) {
      auto parsed = control_frame::parse(in.data() + inStart, in.size() - inStart, frame);
      if (parsed == control_frame::Parse::kNeedMore) break;
      if (parsed == control_frame::Parse::kMalformed) return 0;  // the connection is closed
      HVD_FUZZ_CHECK(frame.payload + frame.length <= in.data() + in.size());
      if (frame.kind == control_frame::kAbort) {
        auto notice = control_frame::decodeAbort(frame.payload, frame.length, 4);
        HVD_FUZZ_CHECK(notice.blamed >= -1 && notice.blamed < 4);
        HVD_FUZZ_CHECK(!notice.reason.empty());
      }
      inStart += control_frame::kHeaderBytes + frame.length;
    }
  }
  return 0;
}
