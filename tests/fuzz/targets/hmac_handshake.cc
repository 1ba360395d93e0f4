// The authentication handshake (common/hmac.h) from both ends: the server's view of a client's
// proof and the client's view of a server's challenge and answer. Nothing a peer without the
// secret sends may verify.
#include <string>
#include <vector>

#include "common/hmac.h"
#include "fuzz_target.h"

using namespace hvd;

HVD_FUZZ_TARGET(hmac_handshake) {
  const std::string secret = "fuzz-job-secret";
  // Server side: the proof's length from its header, then verification.
  auth::ServerHandshake server(secret, "horovod-store-server");
  if (size >= 2) {
    auto need = auth::ServerHandshake::proofBytes(data);
    if (need) HVD_FUZZ_CHECK(*need >= 2 + auth::kNonceBytes + 32 && *need <= 2 + auth::kMaxIdentityBytes + 66);
  }
  std::vector<uint8_t> answer;
  // The challenge's nonce is fresh and random: an input cannot carry a valid MAC for it.
  HVD_FUZZ_CHECK(!server.verify(data, size, answer).has_value());
  HVD_FUZZ_CHECK(answer.empty());

  // Client side: the input as a challenge, then as the server's answer.
  auth::ClientHandshake client(secret, "horovod-store-client", "horovod-store-server");
  auto proof = client.respond(data, size);
  if (proof) {
    HVD_FUZZ_CHECK(size == auth::kChallengeBytes);
    // A proof built for a real server's challenge verifies there (the honest path still works).
    auth::ServerHandshake real(secret, "horovod-store-server");
    auto realProof = client.respond(real.challenge().data(), real.challenge().size());
    HVD_FUZZ_CHECK(realProof.has_value());
    std::vector<uint8_t> realAnswer;
    HVD_FUZZ_CHECK(real.verify(realProof->data(), realProof->size(), realAnswer) == "horovod-store-client");
    HVD_FUZZ_CHECK(client.verifyAnswer(realAnswer.data(), realAnswer.size()));
  }
  HVD_FUZZ_CHECK(!client.verifyAnswer(data, size) || size == auth::kAnswerBytes);
  // Hashing arbitrary lengths (the incremental paths) must agree with one-shot hashing.
  Sha256 parts;
  parts.update(data, size / 2);
  parts.update(data + size / 2, size - size / 2);
  HVD_FUZZ_CHECK(parts.finish() == sha256(data, size));
  return 0;
}
