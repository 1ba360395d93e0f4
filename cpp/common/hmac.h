// SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and the mutual challenge/response that every TCP
// connection of a job runs before anything else (rendezvous store and peer links alike).
// Self-contained: no OpenSSL.
//
// Handshake (all fields fixed-size except the identities):
//   server -> client  Challenge: "HVDA" | nonceS[32]
//   client -> server  Proof:     u16 idLen | clientId | nonceC[32] | HMAC(secret, "client"|nonceS|clientId|nonceC)
//   server -> client  Answer:    HMAC(secret, "server"|nonceC|nonceS|serverId)
// The client's identity (e.g. "rank 3, data plane, job J") is covered by its MAC, so a
// connection cannot be attributed to another peer; the server's MAC covers the identity the
// client expects, so a client cannot be steered to the wrong peer. The server closes a
// connection whose proof does not verify and sends nothing back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hvd {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Digest finish();  // the object must not be used afterwards

 private:
  void block(const uint8_t* p);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

Digest sha256(const void* data, size_t bytes);

// Incremental HMAC-SHA256.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t keyBytes);
  explicit HmacSha256(std::string_view key) : HmacSha256(key.data(), key.size()) {}
  void update(const void* data, size_t bytes) { inner_.update(data, bytes); }
  void update(std::string_view text) { inner_.update(text); }
  Digest finish();

 private:
  Sha256 inner_;
  uint8_t outerPad_[64];
};

Digest hmacSha256(std::string_view key, std::string_view message);

// Equality in time independent of where the inputs differ.
bool constantTimeEqual(const uint8_t* a, const uint8_t* b, size_t bytes);
// Cryptographically random bytes (getrandom). Throws hvd::Error on failure.
void randomBytes(void* out, size_t bytes);
// Lower-case hex.
std::string toHex(const void* data, size_t bytes);

// ---- Handshake messages (no I/O; socket.h runs them over a socket) ---------------------------
namespace auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kChallengeBytes = 4 + kNonceBytes;
constexpr size_t kMaxIdentityBytes = 1024;
constexpr size_t kAnswerBytes = 32;

// Server side of one handshake.
class ServerHandshake {
 public:
  ServerHandshake(std::string secret, std::string serverId);
  const std::vector<uint8_t>& challenge() const { return challenge_; }
  // Bytes of the client's proof given its first two bytes (the identity length), or nullopt if
  // the length is out of range.
  static std::optional<size_t> proofBytes(const uint8_t header[2]);
  // Verifies a complete proof. On success returns the client's identity and fills `answer`.
  std::optional<std::string> verify(const uint8_t* proof, size_t bytes, std::vector<uint8_t>& answer) const;

 private:
  std::string secret_;
  std::string serverId_;
  std::vector<uint8_t> challenge_;
};

// Sent instead of the Answer by a server that drops a connection before checking its proof
// because too many handshakes are pending (a flood of connections), so that the client can tell
// "busy, try again" from "wrong secret" (a server that rejects a proof sends nothing back). It is
// not secret and proves nothing: a peer that sends it can only make a client retry within its
// deadline. No HMAC answer equals it except with probability 2^-256.
const std::array<uint8_t, kAnswerBytes>& busyAnswer();
bool isBusyAnswer(const uint8_t* answer, size_t bytes);

// Client side of one handshake.
class ClientHandshake {
 public:
  ClientHandshake(std::string secret, std::string clientId, std::string expectedServerId);
  // Builds the proof for a challenge; nullopt if the challenge is malformed (not a Horovod peer).
  std::optional<std::vector<uint8_t>> respond(const uint8_t* challenge, size_t bytes);
  bool verifyAnswer(const uint8_t* answer, size_t bytes) const;

 private:
  std::string secret_;
  std::string clientId_;
  std::string expectedServerId_;
  std::array<uint8_t, kNonceBytes> nonceC_{};
  std::array<uint8_t, kNonceBytes> nonceS_{};
};

}  // namespace auth
}  // namespace hvd
