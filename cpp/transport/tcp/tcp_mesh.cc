#include "transport/tcp/tcp_mesh.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <exception>
#include <list>
#include <set>
#include <thread>

#include "common/check.h"
#include "common/hmac.h"
#include "common/logging.h"

namespace hvd::tcp {
namespace {

constexpr const char* kData = "data";
constexpr const char* kControl = "ctrl";
// One handshake may take at most this long, so a silent stray connection cannot stall setup.
constexpr auto kHandshakeBound = std::chrono::seconds(10);

std::string clientIdentity(const std::string& jobId, int rank, const char* plane) {
  return "hvd-tcp/" + jobId + "/rank " + std::to_string(rank) + "/" + plane;
}
std::string serverIdentity(const std::string& jobId, int rank) {
  return "hvd-tcp/" + jobId + "/rank " + std::to_string(rank);
}

std::string hostOf(const TransportContext& context, int rank) {
  if (rank >= 0 && rank < static_cast<int>(context.hostOf.size())) return context.hostOf[rank];
  return "?";
}

// Parses "hvd-tcp/<job>/rank <r>/<plane>"; returns false if it is not one of ours.
bool parseClientIdentity(const std::string& id, const std::string& jobId, int* rank, bool* isData) {
  std::string prefix = "hvd-tcp/" + jobId + "/rank ";
  if (id.compare(0, prefix.size(), prefix) != 0) return false;
  size_t slash = id.find('/', prefix.size());
  if (slash == std::string::npos) return false;
  std::string number = id.substr(prefix.size(), slash - prefix.size());
  std::string plane = id.substr(slash + 1);
  if (number.empty() || number.size() > 9 || number.find_first_not_of("0123456789") != std::string::npos) return false;
  *rank = std::stoi(number);
  if (plane == kData) {
    *isData = true;
  } else if (plane == kControl) {
    *isData = false;
  } else {
    return false;
  }
  return true;
}

void configure(Socket& s, int bufferBytes) {
  setNoDelay(s.fd());
  setLargeBuffers(s.fd(), bufferBytes);
  setKeepAlive(s.fd(), 5, 2, 3);
  setNonBlocking(s.fd(), true);
}

// Accepts the 2 * rank connections of the lower ranks (helper thread of connectMesh).
class Acceptor {
 public:
  Acceptor(const TransportContext& context, Socket& listener, MeshLinks& links, Deadline deadline)
      : context_(context), listener_(listener), links_(links), deadline_(deadline) {
    stop_ = Socket(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    HVD_SYSCHECK(stop_.valid(), "eventfd");
    thread_ = std::thread([this] {
      try {
        run();
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  }
  ~Acceptor() { stopAndJoin(); }

  void stopAndJoin() {
    if (!thread_.joinable()) return;
    uint64_t one = 1;
    (void)!::write(stop_.fd(), &one, sizeof(one));
    thread_.join();
  }
  // Waits for the thread and rethrows its failure.
  void finish() {
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // A connection in the handshake: the challenge is sent, the proof is being read.
  struct Pending {
    Socket sock;
    std::string from;
    auth::ServerHandshake handshake;
    std::vector<uint8_t> in;
    Deadline bound;
  };

  // Handshakes run side by side, each bounded by kHandshakeBound: a connection that stays silent
  // (a port scanner, a stray client) costs its own bound, not everyone's setup.
  void run() {
    const int rank = context_.rank;
    int missing = 2 * rank;
    std::list<Pending> pending;
    std::vector<std::string> silent;  // connections that did not authenticate in time
    std::vector<pollfd> fds;
    while (missing > 0) {
      fds.assign({{listener_.fd(), POLLIN, 0}, {stop_.fd(), POLLIN, 0}});
      Deadline wake = deadline_;
      for (auto& p : pending) {
        fds.push_back({p.sock.fd(), POLLIN, 0});
        wake = wake.earliest(p.bound);
      }
      int rc = ::poll(fds.data(), fds.size(), wake.pollTimeoutMs());
      if (rc < 0 && errno == EINTR) continue;
      HVD_SYSCHECK(rc >= 0, "poll");
      if (fds[1].revents != 0) return;  // connecting side failed; it reports the error
      size_t i = 2;
      for (auto it = pending.begin(); it != pending.end(); ++i) {
        const bool done = fds[i].revents != 0 ? serve(*it, missing) : expire(*it, silent);
        it = done ? pending.erase(it) : std::next(it);
      }
      if (missing > 0 && deadline_.expired()) throw setupTimeout(pending, silent);
      if (fds[0].revents != 0) accept(pending);
    }
  }

  void accept(std::list<Pending>& pending) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN / aborted connection: poll again
    Socket s(fd);
    std::string from = peerAddress(fd);
    auth::ServerHandshake handshake(context_.secret, serverIdentity(context_.jobId, context_.rank));
    Deadline bound = deadline_.earliest(Deadline::after(kHandshakeBound));
    try {
      sendAll(fd, handshake.challenge().data(), handshake.challenge().size(), bound);
    } catch (const Error& e) {
      refuse(from, e.what());
      return;
    }
    pending.push_back(Pending{std::move(s), std::move(from), std::move(handshake), {}, bound});
  }

  // Reads what a pending connection sent; returns true when it is finished with (a link, or refused).
  bool serve(Pending& p, int& missing) {
    uint8_t buf[512];
    ssize_t n = ::recv(p.sock.fd(), buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) {
      refuse(p.from, "closed the connection during the handshake");
      return true;
    }
    p.in.insert(p.in.end(), buf, buf + n);
    if (p.in.size() < 2) return false;
    auto need = auth::ServerHandshake::proofBytes(p.in.data());
    if (!need || p.in.size() > *need) {
      refuse(p.from, "malformed handshake");
      return true;
    }
    if (p.in.size() < *need) return false;
    std::vector<uint8_t> answer;
    auto id = p.handshake.verify(p.in.data(), p.in.size(), answer);
    int peer = -1;
    bool isData = false;
    try {
      if (!id) throw AuthenticationRefused("peer " + p.from + " failed to prove the job secret");
      if (!parseClientIdentity(*id, context_.jobId, &peer, &isData) || peer < 0 || peer >= context_.rank) {
        throw AuthenticationRefused("unexpected identity '" + *id + "'");
      }
      Socket& slot = isData ? links_.data[peer] : links_.control[peer];
      if (slot.valid()) throw AuthenticationRefused("duplicate connection for rank " + std::to_string(peer));
      sendAll(p.sock.fd(), answer.data(), answer.size(), p.bound);
      setNonBlocking(p.sock.fd(), false);
      slot = std::move(p.sock);
      missing--;
    } catch (const Error& e) {
      refuse(p.from, e.what());
    }
    return true;
  }

  bool expire(Pending& p, std::vector<std::string>& silent) {
    if (!p.bound.expired()) return false;
    refuse(p.from, "did not authenticate within " + std::to_string(kHandshakeBound.count()) + " s");
    silent.push_back(p.from);
    return true;
  }

  void refuse(const std::string& from, const std::string& why) {
    links_.refused++;
    HVD_LOG(Warning) << "TCP transport (rank " << context_.rank << ") refused a connection from " << from << ": "
                     << why;
  }

  // The setup deadline passed: names the ranks that did not connect, and the connections that
  // held a handshake open without authenticating (likely why a rank's connection came late).
  Timeout setupTimeout(const std::list<Pending>& pending, const std::vector<std::string>& silent) const {
    std::string who;
    for (int r = 0; r < context_.rank; ++r) {
      if (!links_.data[r].valid() || !links_.control[r].valid()) who += (who.empty() ? "" : ", ") + std::to_string(r);
    }
    std::string idle;
    for (const auto& from : silent) idle += (idle.empty() ? "" : ", ") + from;
    for (const auto& p : pending) idle += (idle.empty() ? "" : ", ") + p.from;
    return Timeout("TCP transport setup timed out on rank " + std::to_string(context_.rank) +
                   ": no connection from rank(s) " + who + " (listening on " + links_.listenAddress + ")" +
                   (idle.empty() ? std::string()
                                 : "; connection(s) from " + idle + " held a handshake open without authenticating"));
  }

  const TransportContext& context_;
  Socket& listener_;
  MeshLinks& links_;
  Deadline deadline_;
  Socket stop_;
  std::thread thread_;
  std::exception_ptr error_;
};

Socket connectTo(const TransportContext& context, int peer, const std::string& address, const char* plane,
                 int bufferBytes, Deadline deadline) {
  auto [host, port] = splitHostPort(address);
  std::string who = "rank " + std::to_string(peer) + " (host " + hostOf(context, peer) + ") at " + address;
  Socket s;
  try {
    s = connectTcp(host, port, deadline, /*retry=*/true, bufferBytes);
  } catch (const Timeout& e) {
    throw Timeout("TCP transport setup: rank " + std::to_string(context.rank) + " could not connect to " + who + ": " +
                  e.what());
  } catch (const Error& e) {
    throw Error("TCP transport setup: rank " + std::to_string(context.rank) + " could not connect to " + who + ": " +
                e.what());
  }
  try {
    authenticateAsClient(s.fd(), context.secret, clientIdentity(context.jobId, context.rank, plane),
                         serverIdentity(context.jobId, peer), deadline);
  } catch (const AuthenticationRefused& e) {
    throw Error("TCP transport setup: " + who +
                " refused authentication (does it have the same job secret?): " + e.what());
  } catch (const Error& e) {
    throw Error("TCP transport setup: authentication with " + who + " failed: " + e.what());
  }
  return s;
}

}  // namespace

std::pair<std::string, std::string> chooseAddresses(const TransportContext& context) {
  auto wildcard = [](const std::string& a) { return a.empty() || a == "0.0.0.0" || a == "::"; };
  std::string bind = "0.0.0.0";
  std::string publish;
  if (!context.bindAddress.empty()) {
    bind = context.bindAddress;
    if (!wildcard(bind)) publish = bind;
  } else if (!context.interface.empty()) {
    std::string ip = interfaceAddress(context.interface);
    if (ip.empty()) {
      std::string known;
      for (const auto& name : interfaceNames()) known += (known.empty() ? "" : ", ") + name;
      throw InvalidArgument(
          "network interface '" + context.interface +
          "' (HOROVOD_GLOO_IFACE) does not exist or has no IP address; interfaces that are up: " + known);
    }
    bind = publish = ip;
  }
  if (publish.empty()) {
    bool oneHost = true;
    for (const auto& h : context.hostOf) oneHost = oneHost && h == context.hostOf.front();
    if (!oneHost) {
      // On a host with several networks (a container bridge, a VPN) the host name may resolve to
      // an address the other hosts cannot reach; the route to an address they all reach is the
      // better guess.
      publish = sourceAddressTowards(context.reachableAddress);
      if (publish.rfind("127.", 0) == 0) publish.clear();
      if (publish.empty()) publish = routableHostAddress();
    }
    if (publish.empty()) publish = "127.0.0.1";
  }
  return {bind, publish};
}

MeshLinks connectMesh(const TransportContext& context, int socketBufferBytes) {
  int rank = context.rank;
  int size = context.size;
  HVD_CHECK(rank >= 0 && rank < size) << "rank " << rank << " of " << size;
  MeshLinks links;
  links.data.resize(size);
  links.control.resize(size);
  if (size == 1) return links;
  Deadline deadline = Deadline::after(context.timeout);

  auto [bindHost, publishHost] = chooseAddresses(context);
  Socket listener = listenTcp(bindHost, 0, std::max(64, 2 * size), socketBufferBytes);
  links.listenAddress = joinHostPort(publishHost, localPort(listener.fd()));
  setString(*context.store, "addr/" + std::to_string(rank), links.listenAddress, deadline);

  Acceptor acceptor(context, listener, links, deadline);
  try {
    for (int peer = rank + 1; peer < size; ++peer) {
      std::string address;
      try {
        address = getString(*context.store, "addr/" + std::to_string(peer), deadline);
      } catch (const Timeout& e) {
        throw Timeout("TCP transport setup timed out on rank " + std::to_string(rank) + ": rank " +
                      std::to_string(peer) + " (host " + hostOf(context, peer) +
                      ") did not publish its address: " + e.what());
      }
      links.data[peer] = connectTo(context, peer, address, kData, socketBufferBytes, deadline);
      links.control[peer] = connectTo(context, peer, address, kControl, socketBufferBytes, deadline);
    }
  } catch (...) {
    acceptor.stopAndJoin();
    throw;
  }
  acceptor.finish();
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    configure(links.data[peer], socketBufferBytes);
    configure(links.control[peer], 0);
  }
  return links;
}

}  // namespace hvd::tcp
