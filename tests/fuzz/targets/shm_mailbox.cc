// A shared-memory mailbox (transport/shm/ring.h, mailbox_reader.h) whose peer writes garbage:
// the input sets the ring's positions (as a peer could corrupt them in the shared segment) and
// fills the ring's bytes, interleaved with reads. Nothing may read or write outside the ring, and
// no announced length is allocated beyond the limit.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/byte_codec.h"
#include "fuzz_target.h"
#include "transport/shm/layout.h"
#include "transport/shm/mailbox_reader.h"
#include "transport/shm/ring.h"

using namespace hvd;
using namespace hvd::shm;

HVD_FUZZ_TARGET(shm_mailbox) {
  constexpr size_t kCapacity = 64;  // below the 255 bytes one write may carry
  RingControl control;
  control.head.store(0);
  control.tail.store(0);
  std::vector<uint8_t> bytes(kCapacity);
  Ring reader(&control, bytes.data(), kCapacity);
  Ring writer(&control, bytes.data(), kCapacity);
  // A small limit keeps each run fast; the check is the same as the transport's 1 GiB one.
  constexpr uint64_t kLimit = 1 << 16;
  MailboxReader mailbox(kLimit);
  ByteReader in(data, size, "fuzz input");
  try {
    while (!in.atEnd()) {
      switch (in.u8() % 5) {
        case 0:  // the peer overwrites its head position
          control.head.store(in.u64());
          break;
        case 1:  // ... or the reader's tail
          control.tail.store(in.u64());
          break;
        case 2: {  // the peer writes bytes through its (own) ring view, in chunks of up to maxChunk
          const size_t maxChunk = in.u8() + 1;
          const size_t n = std::min<size_t>(in.u8(), in.left());
          const size_t put = writer.write(in.raw(n), n, maxChunk);
          HVD_FUZZ_CHECK(put <= n && put <= maxChunk);
          break;
        }
        case 3: {  // the peer scribbles over the ring's bytes directly
          size_t at = in.u8() % kCapacity;
          uint8_t v = in.u8();
          bytes[at] = v;
          break;
        }
        case 4: {  // this rank polls its mailbox
          bool consumed = false;
          try {
            auto message = mailbox.poll(reader, consumed);
            if (message) HVD_FUZZ_CHECK(message->size() <= kLimit);
          } catch (const MailboxCorrupt&) {
            return 0;  // the transport reports the peer lost
          }
          break;
        }
      }
    }
  } catch (const DecodeError&) {
  }
  return 0;
}
