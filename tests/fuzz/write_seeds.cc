// Writes the binary seed corpora of tests/fuzz/corpus/ with the core's own encoders: the frames
// a 2-rank job exchanges (negotiation request and response lists in their first-step and cached
// forms, an eviction, an abort notice; store requests and responses; a handshake; control
// frames; a mailbox stream). Usage: fuzz_write_seeds <corpus dir>. The text corpora (hosts,
// config files, arguments) are written by hand.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/byte_codec.h"
#include "common/hmac.h"
#include "engine/message.h"
#include "store/store_protocol.h"
#include "transport/tcp/control_frame.h"

using namespace hvd;
using namespace hvd::engine;
namespace fs = std::filesystem;

namespace {

fs::path root;

void put(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Request allreduce(const std::string& name, std::vector<int64_t> shape) {
  Request r;
  r.params.kind = Kind::kAllreduce;
  r.params.dtype = DataType::kFloat32;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

void engineSeeds() {
  std::vector<uint8_t> out;
  RequestList first;  // a first step: full requests
  first.requests.push_back(allreduce("grad.fc1.weight", {128, 64}));
  first.requests.push_back(allreduce("grad.fc1.bias", {128}));
  Request gather = allreduce("allgather.x", {3, 4});
  gather.params.kind = Kind::kAllgather;
  first.requests.push_back(gather);
  Request all2all = allreduce("alltoall.y", {4, 2});
  all2all.params.kind = Kind::kAlltoall;
  all2all.splits = {2, 2};
  first.requests.push_back(all2all);
  encode(first, out);
  for (const char* t : {"engine_messages", "response_cache_ids"}) put(t, "requests_first_step", out);
  RequestList steady;  // later steps: cache hits only, as a bit vector
  steady.lastSeq = 41;
  steady.hits = {0, 1, 2, 3, 5, 8};
  encode(steady, out);
  for (const char* t : {"engine_messages", "response_cache_ids"}) put(t, "requests_hits_bitvector", out);
  steady.hits = {1, 1000, 70000};
  encode(steady, out);
  for (const char* t : {"engine_messages", "response_cache_ids"}) put(t, "requests_hits_deltas", out);
  RequestList bye;
  bye.shutdown = true;
  encode(bye, out);
  put("engine_messages", "requests_shutdown", out);

  ResponseList responses;  // the coordinator's answer to the first step: inserts into the cache
  responses.seq = 1;
  Response r;
  r.params.kind = Kind::kAllreduce;
  r.params.dtype = DataType::kFloat32;
  r.params.prescale = 0.5;
  for (uint32_t id = 0; id < 2; ++id) {
    TensorInfo t;
    t.name = "grad." + std::to_string(id);
    t.shape = {128, 64};
    t.cacheId = id;
    t.cacheInsert = true;
    r.tensors.push_back(t);
  }
  responses.items.push_back(r);
  Response error;
  error.params.kind = Kind::kError;
  error.error = "Mismatched allreduce tensor shapes";
  TensorInfo et;
  et.name = "bad";
  error.tensors.push_back(et);
  responses.items.push_back(error);
  encode(responses, out);
  for (const char* t : {"engine_messages", "response_cache_ids"}) put(t, "responses_first_step", out);
  ResponseList cached;  // a steady step: hits, an id-only response, an eviction, new knobs
  cached.seq = 42;
  cached.hits = {0, 1, 2, 3};
  cached.knobs = Knobs{.fusionThreshold = 64 << 20, .burstQuietUs = 100};
  Response ids;
  ids.params.kind = Kind::kAllreduce;
  ids.cachedForm = true;
  ids.tensors.resize(2);
  ids.tensors[0].cacheId = 1;
  ids.tensors[1].cacheId = 3;
  cached.items.push_back(ids);
  Response evict;
  evict.params.kind = Kind::kEvict;
  evict.tensors.resize(1);
  evict.tensors[0].cacheId = 2;
  cached.items.push_back(evict);
  cached.shutdown = true;
  cached.shutdownBy = 1;
  encode(cached, out);
  for (const char* t : {"engine_messages", "response_cache_ids"}) put(t, "responses_cached_step", out);
  ErrorInfo abort;
  abort.kind = ErrorKind::kPeerLost;
  abort.rank = 1;
  abort.peerAborted = true;
  abort.message = "Horovod rank 1 exited";
  encode(abort, out);
  put("engine_messages", "abort_peer_lost", out);
}

std::vector<uint8_t> body(store_wire::Writer& w) {
  auto& frame = w.finish();
  return std::vector<uint8_t>(frame.begin() + store_wire::kHeaderBytes, frame.end());
}

void storeSeeds() {
  using store_wire::Op;
  using store_wire::Status;
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Op::kSet)).str32("rank/0/addr").str32("10.0.0.1:4000");
    put("store_server", "set", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Op::kGet)).u64(30000).str32("rank/1/addr");
    put("store_server", "get", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Op::kAdd)).str32("12").i64(1);
    put("store_server", "add", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Op::kWait)).u64(store_wire::kNoTimeout).u32(2).str32("a").str32("b");
    put("store_server", "wait", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Status::kOk)).str32("10.0.0.1:4000");
    put("store_client", "ok_value", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Status::kOk)).i64(7);
    put("store_client", "ok_counter", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Status::kTimeout)).u32(2).str32("rank/1/addr").str32("rank/2/addr");
    put("store_client", "timeout", body(w));
  }
  {
    store_wire::Writer w;
    w.body().u8(uint8_t(Status::kError)).str32("add() on rendezvous key 'x' whose value is not an integer");
    put("store_client", "error", body(w));
  }
}

void handshakeSeeds() {
  auth::ServerHandshake server("secret", "horovod-store-server");
  put("hmac_handshake", "challenge", server.challenge());
  auth::ClientHandshake client("secret", "horovod-store-client", "horovod-store-server");
  auto proof = client.respond(server.challenge().data(), server.challenge().size());
  put("hmac_handshake", "proof", *proof);
  std::vector<uint8_t> answer;
  server.verify(proof->data(), proof->size(), answer);
  put("hmac_handshake", "answer", answer);
}

void frameSeeds() {
  namespace cf = hvd::tcp::control_frame;
  std::vector<uint8_t> stream = {7};  // first byte: recv() chunk size
  auto frame = [&](uint8_t kind, const std::vector<uint8_t>& payload) {
    uint32_t n = static_cast<uint32_t>(payload.size());
    const auto* p = reinterpret_cast<const uint8_t*>(&n);
    stream.insert(stream.end(), p, p + 4);
    stream.push_back(kind);
    stream.insert(stream.end(), payload.begin(), payload.end());
  };
  std::vector<uint8_t> message;
  RequestList list;
  list.requests.push_back(allreduce("grad", {4}));
  encode(list, message);
  frame(cf::kMessage, message);
  frame(cf::kPing, {});
  frame(cf::kPong, {});
  std::vector<uint8_t> abort = {1, 0, 0, 0};
  for (char c : std::string("rank 1 timed out")) abort.push_back(uint8_t(c));
  frame(cf::kAbort, abort);
  frame(cf::kGoodbye, {});
  put("tcp_control_frames", "job_stream", stream);

  // The shm mailbox: op 2 (write) of two messages (u64 length | bytes), then polls (op 4).
  std::vector<uint8_t> mail;
  auto writeOp = [&](const std::vector<uint8_t>& bytes) {
    mail.push_back(2);
    mail.push_back(64);  // max chunk - 1
    mail.push_back(static_cast<uint8_t>(bytes.size()));
    mail.insert(mail.end(), bytes.begin(), bytes.end());
  };
  std::vector<uint8_t> framed(8, 0);
  framed[0] = static_cast<uint8_t>(message.size());
  framed.insert(framed.end(), message.begin(), message.end());
  writeOp(framed);
  mail.push_back(4);
  writeOp(framed);
  mail.push_back(4);
  mail.push_back(4);
  put("shm_mailbox", "two_messages", mail);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  root = argv[1];
  engineSeeds();
  storeSeeds();
  handshakeSeeds();
  frameSeeds();
  return 0;
}
