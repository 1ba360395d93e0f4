// tcp_pair: one rank of a small TCP-transport job, for tests that place ranks in separate
// network namespaces (tcp_netns_test.sh). Rank 0 may also run the rendezvous server.
//
//   tcp_pair --rank R --size N --store HOST:PORT --secret S [--serve] [--bind IP]
//            [--hosts h0,h1,...] [--bytes B]
//   tcp_pair --expect-refused --store HOST:PORT --secret WRONG
//
// Each rank exchanges B bytes (default 64 MiB) with its ring neighbours, checks the contents,
// swaps mailbox messages with every rank, and prints "OK rank R ...". With --serve, rank 0
// prints "refused connections: K" at the end. --expect-refused exits 0 only if the store
// refuses the secret. Exit codes: 0 ok, 1 failure (message on stderr), 2 usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/socket.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"
#include "transport/transport.h"

namespace {

using namespace std::chrono_literals;
using hvd::Deadline;

struct Options {
  int rank = -1;
  int size = 2;
  std::string store;
  std::string secret;
  std::string bind;
  std::vector<std::string> hosts;
  size_t bytes = size_t{64} << 20;
  bool serve = false;
  bool expectRefused = false;
};

int usage() {
  std::fprintf(stderr,
               "usage: tcp_pair --rank R --size N --store HOST:PORT --secret S [--serve] [--bind IP] "
               "[--hosts a,b] [--bytes B]\n       tcp_pair --expect-refused --store HOST:PORT --secret S\n");
  return 2;
}

uint8_t patternByte(int from, size_t i) { return static_cast<uint8_t>((i * 131 + from * 17 + (i >> 12)) & 0xff); }

int run(const Options& o) {
  auto [storeHost, storePort] = hvd::splitHostPort(o.store);
  if (o.expectRefused) {
    try {
      hvd::TcpStore store(storeHost, storePort, o.secret, Deadline::after(20s));
      std::fprintf(stderr, "store accepted a wrong secret\n");
      return 1;
    } catch (const hvd::StoreError& e) {
      std::printf("refused as expected: %s\n", e.what());
      return std::strstr(e.what(), "refused authentication") != nullptr ? 0 : 1;
    }
  }
  std::unique_ptr<hvd::TcpStoreServer> server;
  if (o.serve) server = std::make_unique<hvd::TcpStoreServer>(storeHost, storePort, o.secret);

  hvd::TransportContext context;
  context.rank = o.rank;
  context.size = o.size;
  context.hostOf = o.hosts;
  if (context.hostOf.empty()) {
    for (int r = 0; r < o.size; ++r) context.hostOf.push_back("host" + std::to_string(r));
  }
  context.store = std::make_shared<hvd::PrefixStore>(
      "tcp_pair", std::make_shared<hvd::TcpStore>(storeHost, storePort, o.secret, Deadline::after(30s)));
  context.jobId = "tcp-pair";
  context.secret = o.secret;
  context.bindAddress = o.bind;
  context.timeout = 30000ms;
  auto t = hvd::makeTransport("tcp", context);

  int next = (o.rank + 1) % o.size, prev = (o.rank + o.size - 1) % o.size;
  std::vector<uint8_t> out(o.bytes), in(o.bytes);
  for (size_t i = 0; i < out.size(); ++i) out[i] = patternByte(o.rank, i);
  auto start = std::chrono::steady_clock::now();
  t->sendRecv(next, out.data(), out.size(), prev, in.data(), in.size(), Deadline::after(60s));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != patternByte(prev, i)) {
      std::fprintf(stderr, "rank %d: byte %zu from rank %d is wrong\n", o.rank, i, prev);
      return 1;
    }
  }
  for (int peer = 0; peer < o.size; ++peer) {
    std::string text = "hello from " + std::to_string(o.rank);
    t->post(peer, text.data(), text.size());
  }
  int got = 0;
  Deadline deadline = Deadline::after(30s);
  while (got < o.size) {
    auto m = t->poll();
    if (!m) {
      if (!t->waitForMessage(deadline) && deadline.expired()) {
        std::fprintf(stderr, "rank %d: mailbox timed out\n", o.rank);
        return 1;
      }
      continue;
    }
    std::string text(m->bytes.begin(), m->bytes.end());
    if (text != "hello from " + std::to_string(m->from)) {
      std::fprintf(stderr, "rank %d: bad message '%s'\n", o.rank, text.c_str());
      return 1;
    }
    got++;
  }
  // Barrier: nobody leaves (taking the server down) before everyone is done.
  for (int peer = 0; peer < o.size; ++peer) {
    uint8_t token = 1;
    t->sendRecv(peer, &token, 1, peer, &token, 1, Deadline::after(30s));
  }
  std::printf("OK rank %d: %zu bytes from rank %d in %.3f s (%.1f MB/s), %d messages\n", o.rank, o.bytes, prev, seconds,
              o.bytes / seconds / 1e6, got);
  if (server) std::printf("refused connections: %lld\n", static_cast<long long>(server->refusedConnections()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::exit(usage());
      }
      return argv[++i];
    };
    if (a == "--rank") {
      o.rank = std::atoi(value().c_str());
    } else if (a == "--size") {
      o.size = std::atoi(value().c_str());
    } else if (a == "--store") {
      o.store = value();
    } else if (a == "--secret") {
      o.secret = value();
    } else if (a == "--bind") {
      o.bind = value();
    } else if (a == "--bytes") {
      o.bytes = std::strtoull(value().c_str(), nullptr, 10);
    } else if (a == "--hosts") {
      std::stringstream list(value());
      std::string h;
      while (std::getline(list, h, ',')) o.hosts.push_back(h);
    } else if (a == "--serve") {
      o.serve = true;
    } else if (a == "--expect-refused") {
      o.expectRefused = true;
    } else {
      return usage();
    }
  }
  if (o.store.empty() || (!o.expectRefused && (o.rank < 0 || o.rank >= o.size))) return usage();
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tcp_pair rank %d: %s\n", o.rank, e.what());
    return 1;
  }
}
