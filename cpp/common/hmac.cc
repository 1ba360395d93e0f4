#include "common/hmac.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace hvd {
namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

constexpr char kChallengeMagic[4] = {'H', 'V', 'D', 'A'};

}  // namespace

Sha256::Sha256() {
  static constexpr uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::memcpy(state_, kInit, sizeof(state_));
}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) | (uint32_t(p[4 * i + 2]) << 8) |
           uint32_t(p[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + ch + kRoundConstants[i] + w[i];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  totalBytes_ += bytes;
  if (buffered_ > 0) {
    size_t take = std::min(bytes, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    bytes -= take;
    if (buffered_ < sizeof(buffer_)) return;
    block(buffer_);
    buffered_ = 0;
  }
  while (bytes >= 64) {
    block(p);
    p += 64;
    bytes -= 64;
  }
  std::memcpy(buffer_, p, bytes);
  buffered_ = bytes;
}

Digest Sha256::finish() {
  uint64_t bits = totalBytes_ * 8;
  uint8_t pad[72] = {0x80};
  // Pad to 56 mod 64, then the 64-bit big-endian bit length.
  size_t padBytes = (buffered_ < 56) ? (56 - buffered_) : (120 - buffered_);
  for (int i = 0; i < 8; ++i) pad[padBytes + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  uint64_t keep = totalBytes_;
  update(pad, padBytes + 8);
  totalBytes_ = keep;
  Digest out;
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = static_cast<uint8_t>(state_[i] >> 24);
    out[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
    out[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
    out[4 * i + 3] = static_cast<uint8_t>(state_[i]);
  }
  return out;
}

Digest sha256(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.finish();
}

HmacSha256::HmacSha256(const void* key, size_t keyBytes) {
  uint8_t block[64] = {0};
  if (keyBytes > 64) {
    Digest d = sha256(key, keyBytes);
    std::memcpy(block, d.data(), d.size());
  } else if (keyBytes > 0) {
    std::memcpy(block, key, keyBytes);
  }
  uint8_t innerPad[64];
  for (int i = 0; i < 64; ++i) {
    innerPad[i] = block[i] ^ 0x36;
    outerPad_[i] = block[i] ^ 0x5c;
  }
  inner_.update(innerPad, sizeof(innerPad));
}

Digest HmacSha256::finish() {
  Digest innerDigest = inner_.finish();
  Sha256 outer;
  outer.update(outerPad_, sizeof(outerPad_));
  outer.update(innerDigest.data(), innerDigest.size());
  return outer.finish();
}

Digest hmacSha256(std::string_view key, std::string_view message) {
  HmacSha256 h(key);
  h.update(message);
  return h.finish();
}

bool constantTimeEqual(const uint8_t* a, const uint8_t* b, size_t bytes) {
  uint8_t diff = 0;
  for (size_t i = 0; i < bytes; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

void randomBytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    ssize_t n = ::getrandom(p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    HVD_SYSCHECK(n > 0, "getrandom");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

std::string toHex(const void* data, size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

namespace auth {
namespace {

Digest clientMac(const std::string& secret, const uint8_t* nonceS, const std::string& clientId, const uint8_t* nonceC) {
  HmacSha256 h(secret);
  h.update("client");
  h.update(nonceS, kNonceBytes);
  h.update(clientId);
  h.update(nonceC, kNonceBytes);
  return h.finish();
}

Digest serverMac(const std::string& secret, const uint8_t* nonceC, const uint8_t* nonceS, const std::string& serverId) {
  HmacSha256 h(secret);
  h.update("server");
  h.update(nonceC, kNonceBytes);
  h.update(nonceS, kNonceBytes);
  h.update(serverId);
  return h.finish();
}

}  // namespace

ServerHandshake::ServerHandshake(std::string secret, std::string serverId)
    : secret_(std::move(secret)), serverId_(std::move(serverId)), challenge_(kChallengeBytes) {
  std::memcpy(challenge_.data(), kChallengeMagic, 4);
  randomBytes(challenge_.data() + 4, kNonceBytes);
}

std::optional<size_t> ServerHandshake::proofBytes(const uint8_t header[2]) {
  size_t idLen = size_t(header[0]) | (size_t(header[1]) << 8);
  if (idLen > kMaxIdentityBytes) return std::nullopt;
  return 2 + idLen + kNonceBytes + 32;
}

std::optional<std::string> ServerHandshake::verify(const uint8_t* proof, size_t bytes,
                                                   std::vector<uint8_t>& answer) const {
  if (bytes < 2) return std::nullopt;
  auto expected = proofBytes(proof);
  if (!expected || *expected != bytes) return std::nullopt;
  size_t idLen = bytes - 2 - kNonceBytes - 32;
  std::string clientId(reinterpret_cast<const char*>(proof + 2), idLen);
  const uint8_t* nonceC = proof + 2 + idLen;
  const uint8_t* mac = nonceC + kNonceBytes;
  Digest want = clientMac(secret_, challenge_.data() + 4, clientId, nonceC);
  if (!constantTimeEqual(want.data(), mac, want.size())) return std::nullopt;
  Digest reply = serverMac(secret_, nonceC, challenge_.data() + 4, serverId_);
  answer.assign(reply.begin(), reply.end());
  return clientId;
}

ClientHandshake::ClientHandshake(std::string secret, std::string clientId, std::string expectedServerId)
    : secret_(std::move(secret)), clientId_(std::move(clientId)), expectedServerId_(std::move(expectedServerId)) {
  HVD_CHECK_LE(clientId_.size(), kMaxIdentityBytes) << "identity too long";
  randomBytes(nonceC_.data(), nonceC_.size());
}

std::optional<std::vector<uint8_t>> ClientHandshake::respond(const uint8_t* challenge, size_t bytes) {
  if (bytes != kChallengeBytes || std::memcmp(challenge, kChallengeMagic, 4) != 0) return std::nullopt;
  std::memcpy(nonceS_.data(), challenge + 4, kNonceBytes);
  std::vector<uint8_t> proof;
  proof.reserve(2 + clientId_.size() + kNonceBytes + 32);
  proof.push_back(static_cast<uint8_t>(clientId_.size() & 0xff));
  proof.push_back(static_cast<uint8_t>(clientId_.size() >> 8));
  proof.insert(proof.end(), clientId_.begin(), clientId_.end());
  proof.insert(proof.end(), nonceC_.begin(), nonceC_.end());
  Digest mac = clientMac(secret_, nonceS_.data(), clientId_, nonceC_.data());
  proof.insert(proof.end(), mac.begin(), mac.end());
  return proof;
}

const std::array<uint8_t, kAnswerBytes>& busyAnswer() {
  static const std::array<uint8_t, kAnswerBytes> busy = [] {
    std::array<uint8_t, kAnswerBytes> b{};
    const char text[] = "HVD busy: too many handshakes";  // zero-padded to kAnswerBytes
    static_assert(sizeof(text) <= kAnswerBytes);
    std::memcpy(b.data(), text, sizeof(text));
    return b;
  }();
  return busy;
}

bool isBusyAnswer(const uint8_t* answer, size_t bytes) {
  return bytes == kAnswerBytes && std::memcmp(answer, busyAnswer().data(), kAnswerBytes) == 0;
}

bool ClientHandshake::verifyAnswer(const uint8_t* answer, size_t bytes) const {
  if (bytes != kAnswerBytes) return false;
  Digest want = serverMac(secret_, nonceC_.data(), nonceS_.data(), expectedServerId_);
  return constantTimeEqual(want.data(), answer, want.size());
}

}  // namespace auth
}  // namespace hvd
