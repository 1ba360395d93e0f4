// SHA-256 (FIPS 180-2 examples), HMAC-SHA256 (RFC 4231 test cases) and the handshake messages.
#include "common/hmac.h"

#include <gtest/gtest.h>

#include <string>

namespace hvd {
namespace {

std::string hexOf(const Digest& d) { return toHex(d.data(), d.size()); }
std::string bytes(size_t n, uint8_t value) { return std::string(n, static_cast<char>(value)); }

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(hexOf(sha256("", 0)), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hexOf(sha256("abc", 3)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hexOf(sha256(two.data(), two.size())), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(hexOf(sha256(million.data(), million.size())),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEverySplit) {
  std::string text;
  for (int i = 0; i < 200; ++i) text.push_back(static_cast<char>('a' + i % 26));
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 200}) {
    Digest whole = sha256(text.data(), len);
    for (size_t split = 0; split <= len; split += 7) {
      Sha256 h;
      h.update(text.data(), split);
      h.update(text.data() + split, len - split);
      EXPECT_EQ(h.finish(), whole) << "len " << len << " split " << split;
    }
  }
}

TEST(HmacSha256, Rfc4231) {
  EXPECT_EQ(hexOf(hmacSha256(bytes(20, 0x0b), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hexOf(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hexOf(hmacSha256(bytes(20, 0xaa), bytes(50, 0xdd))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  EXPECT_EQ(hexOf(hmacSha256(key4, bytes(50, 0xcd))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  EXPECT_EQ(hexOf(hmacSha256(bytes(20, 0x0c), "Test With Truncation")).substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(hexOf(hmacSha256(bytes(131, 0xaa), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hexOf(hmacSha256(bytes(131, 0xaa),
                             "This is a test using a larger than block-size key and a larger than block-size "
                             "data. The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(Handshake, MatchingSecretsAuthenticateBothWays) {
  auth::ServerHandshake server("s3cret", "server-A");
  auth::ClientHandshake client("s3cret", "client-7", "server-A");
  auto proof = client.respond(server.challenge().data(), server.challenge().size());
  ASSERT_TRUE(proof.has_value());
  std::vector<uint8_t> answer;
  auto id = server.verify(proof->data(), proof->size(), answer);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(*id, "client-7");
  EXPECT_TRUE(client.verifyAnswer(answer.data(), answer.size()));
}

TEST(Handshake, WrongSecretOrTamperingIsRejected) {
  auth::ServerHandshake server("right", "srv");
  std::vector<uint8_t> answer;
  {
    auth::ClientHandshake client("wrong", "c", "srv");
    auto proof = client.respond(server.challenge().data(), server.challenge().size());
    EXPECT_FALSE(server.verify(proof->data(), proof->size(), answer).has_value());
  }
  {
    // Claiming another identity after computing the MAC breaks it.
    auth::ClientHandshake client("right", "rank 1", "srv");
    auto proof = client.respond(server.challenge().data(), server.challenge().size());
    (*proof)[2 + 5] = '2';
    EXPECT_FALSE(server.verify(proof->data(), proof->size(), answer).has_value());
  }
  {
    // The client notices a server that answers for a different identity.
    auth::ServerHandshake other("right", "someone-else");
    auth::ClientHandshake client("right", "c", "srv");
    auto proof = client.respond(other.challenge().data(), other.challenge().size());
    ASSERT_TRUE(other.verify(proof->data(), proof->size(), answer).has_value());
    EXPECT_FALSE(client.verifyAnswer(answer.data(), answer.size()));
  }
  {
    auth::ClientHandshake client("right", "c", "srv");
    std::vector<uint8_t> junk(auth::kChallengeBytes, 'x');
    EXPECT_FALSE(client.respond(junk.data(), junk.size()).has_value());
  }
}

TEST(Handshake, ChallengesAreFresh) {
  auth::ServerHandshake a("k", "s"), b("k", "s");
  EXPECT_NE(a.challenge(), b.challenge());
}

}  // namespace
}  // namespace hvd
