// MailboxReader: reassembles the messages a peer writes into its mailbox ring (u64 length |
// bytes, one after another). The ring lives in memory the peer writes, so the length is checked
// before anything is allocated for it: a corrupted length fails with MailboxCorrupt instead of
// allocating what it says. One reader per inbound mailbox, used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "horovod/errors.h"
#include "transport/shm/ring.h"

namespace hvd::shm {

// Largest mailbox message a peer may announce (the TCP control plane's limit too).
constexpr uint64_t kMaxMailboxMessageBytes = uint64_t{1} << 30;

class MailboxCorrupt : public Error {
  using Error::Error;
};

class MailboxReader {
 public:
  explicit MailboxReader(uint64_t maxMessageBytes = kMaxMailboxMessageBytes) : maxMessageBytes_(maxMessageBytes) {}

  // Reads what `ring` holds now; returns a complete message, or nullopt when more is needed.
  // `consumed` is set when bytes were taken out of the ring (its writer may wait for space).
  // Throws MailboxCorrupt on a length above the limit (kMaxMailboxMessageBytes by default).
  std::optional<std::vector<uint8_t>> poll(Ring& ring, bool& consumed) {
    consumed = false;
    if (!haveLength_) {
      size_t n = ring.read(lengthBytes_ + lengthGot_, sizeof lengthBytes_ - lengthGot_);
      lengthGot_ += n;
      consumed = n > 0;
      if (lengthGot_ < sizeof lengthBytes_) return std::nullopt;
      uint64_t length;
      std::memcpy(&length, lengthBytes_, sizeof length);
      if (length > maxMessageBytes_) {
        throw MailboxCorrupt("announced a mailbox message of " + std::to_string(length) + " bytes (the limit is " +
                             std::to_string(maxMessageBytes_) + "): its shared-memory mailbox is corrupt");
      }
      message_.resize(static_cast<size_t>(length));
      messageGot_ = 0;
      haveLength_ = true;
    }
    if (messageGot_ < message_.size()) {
      size_t n = ring.read(message_.data() + messageGot_, message_.size() - messageGot_);
      messageGot_ += n;
      consumed = consumed || n > 0;
      if (messageGot_ < message_.size()) return std::nullopt;
    }
    std::vector<uint8_t> message = std::move(message_);
    message_ = {};
    haveLength_ = false;
    lengthGot_ = 0;
    messageGot_ = 0;
    return message;
  }

 private:
  uint64_t maxMessageBytes_;
  uint8_t lengthBytes_[8] = {};
  size_t lengthGot_ = 0;
  bool haveLength_ = false;
  std::vector<uint8_t> message_;
  size_t messageGot_ = 0;
};

}  // namespace hvd::shm
