#include "mpi/mpi_bootstrap.h"

#include <algorithm>
#include <cstring>

#include "common/hmac.h"
#include "common/logging.h"
#include "common/socket.h"
#include "horovod/errors.h"
#include "mpi/mpi_library.h"
#include "store/served_tcp_store.h"
#include "store/tcp_store.h"

namespace hvd::mpi {
namespace {

constexpr int kPayloadBytes = 512;  // "host\nport\nsecret" or "!reason", NUL-padded

std::string hexSecret() {
  unsigned char raw[32];
  randomBytes(raw, sizeof(raw));
  return toHex(raw, sizeof(raw));
}

void check(int rc, const char* err, const std::string& what) {
  if (rc != 0) throw Error("MPI bootstrap: " + what + ": " + err);
}

// Every rank of the communicator reports to rank 0 before the first blocking collective, within
// options.timeout: a rank that never calls init() fails the others with its number instead of
// leaving them in MPI forever.
void awaitAllRanks(const HvdMpiPlugin& plugin, const MpiBootstrapOptions& options, const MpiJob& job) {
  constexpr int kListed = 16;
  int missing[kListed] = {0};
  int missingCount = 0;
  char err[1024] = {0};
  char ready = 1;
  const int rc = plugin.rendezvousBroadcast(options.comm, &ready, 1, 0, options.timeout.count(), missing, kListed,
                                            &missingCount, err, sizeof(err));
  if (rc == 0) return;
  const std::string seconds = std::to_string(options.timeout.count() / 1000.0);
  const std::string within =
      " within " + seconds.substr(0, seconds.find('.') + 2) + " s (HOROVOD_GLOO_TIMEOUT_SECONDS)";
  if (rc != HVD_MPI_TIMED_OUT) check(rc, err, "waiting for every rank to call hvd.init()");
  if (missingCount < 0) {
    throw Error("MPI bootstrap: not every one of the " + std::to_string(job.size) + " ranks called hvd.init()" +
                within + " (rank 0 names the missing ones, unless it is one of them)");
  }
  std::string ranks;
  for (int i = 0; i < std::min(missingCount, kListed); ++i) ranks += (i ? ", " : "") + std::to_string(missing[i]);
  if (missingCount > kListed) ranks += ", ... (" + std::to_string(missingCount) + " in all)";
  throw Error("MPI bootstrap: rank" + std::string(missingCount > 1 ? "s " : " ") + ranks + " of " +
              std::to_string(job.size) + " did not call hvd.init()" + within +
              ": every process of the MPI job (or of the communicator given to init) must call it");
}

}  // namespace

MpiJob bootstrapOverMpi(const MpiBootstrapOptions& options) {
  const HvdMpiPlugin& plugin = initMpi(options.threadsDisable, options.dataPlane);
  char err[1024] = {0};
  MpiJob job;
  check(plugin.rankSize(options.comm, &job.rank, &job.size, err, sizeof(err)), err, "rank and size");
  awaitAllRanks(plugin, options, job);
  check(
      plugin.placement(options.comm, &job.localRank, &job.localSize, &job.crossRank, &job.crossSize, err, sizeof(err)),
      err, "node placement");

  Deadline deadline = Deadline::after(options.timeout);
  char payload[kPayloadBytes] = {0};
  std::unique_ptr<TcpStoreServer> server;
  std::string host;
  if (job.rank == 0) {
    // One host: loopback only. Several: all interfaces, published under one routable address.
    const bool oneHost = job.localSize == job.size;
    std::string text;
    try {
      if (oneHost) {
        host = "127.0.0.1";
      } else if (!options.interface.empty()) {
        host = interfaceAddress(options.interface);
        if (host.empty()) throw Error("HOROVOD_GLOO_IFACE='" + options.interface + "' has no address on rank 0");
      } else {
        host = routableHostAddress();
        if (host.empty()) throw Error("rank 0's host has no routable address; set HOROVOD_GLOO_IFACE");
      }
      job.secret = hexSecret();
      server = std::make_unique<TcpStoreServer>(oneHost ? "127.0.0.1" : "0.0.0.0", 0, job.secret);
      text = host + "\n" + std::to_string(server->port()) + "\n" + job.secret;
    } catch (const std::exception& e) {
      text = std::string("!") + e.what();  // tell the other ranks instead of leaving them waiting
    }
    std::strncpy(payload, text.c_str(), kPayloadBytes - 1);
  }
  check(plugin.broadcast(options.comm, payload, kPayloadBytes, 0, err, sizeof(err)), err,
        "broadcast of the rendezvous address");
  std::string text(payload);
  if (!text.empty() && text[0] == '!') {
    throw Error("MPI bootstrap: rank 0 could not start the rendezvous server: " + text.substr(1));
  }
  size_t a = text.find('\n'), b = text.find('\n', a + 1);
  if (a == std::string::npos || b == std::string::npos) throw Error("MPI bootstrap: malformed rendezvous address");
  host = text.substr(0, a);
  const auto port = static_cast<uint16_t>(std::stoi(text.substr(a + 1, b - a - 1)));
  job.secret = text.substr(b + 1);
  if (server) {
    job.store = std::make_shared<ServedTcpStore>(std::move(server), host, job.secret, deadline);
  } else {
    job.store = std::make_shared<TcpStore>(host, port, job.secret, deadline);
  }
  HVD_LOG(Debug) << "MPI bootstrap: rank " << job.rank << " of " << job.size << " (local " << job.localRank << "/"
                 << job.localSize << ", cross " << job.crossRank << "/" << job.crossSize << "), rendezvous at " << host
                 << ":" << port;
  return job;
}

}  // namespace hvd::mpi
