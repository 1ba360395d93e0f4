#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <optional>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/check.h"
#include "common/hmac.h"

namespace hvd {
namespace {

std::string errnoText(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

std::string formatSockaddr(const sockaddr* sa, bool withPort) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return withPort ? joinHostPort(host, port) : std::string(host);
}

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head != nullptr) freeaddrinfo(head);
  }
};

// Resolves host:port; throws hvd::Error naming the host on failure.
void resolve(const std::string& host, uint16_t port, bool passive, AddrInfoList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  if (passive && (host.empty() || host == "0.0.0.0")) {
    hints.ai_family = AF_INET;
    node = nullptr;
  }
  int rc = getaddrinfo(node, service.c_str(), &hints, &out.head);
  if (rc != 0) {
    throw Error("could not resolve address '" + host + "': " + gai_strerror(rc));
  }
}

}  // namespace

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

std::string joinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::pair<std::string, uint16_t> splitHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    throw InvalidArgument("address '" + address + "' is not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) {
    throw InvalidArgument("address '" + address + "' has a bad port");
  }
  return {host, static_cast<uint16_t>(port)};
}

std::string peerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return formatSockaddr(reinterpret_cast<sockaddr*>(&ss), true);
}

std::string localAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return formatSockaddr(reinterpret_cast<sockaddr*>(&ss), true);
}

std::string localIp(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return formatSockaddr(reinterpret_cast<sockaddr*>(&ss), false);
}

uint16_t localPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  HVD_SYSCHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0, "getsockname");
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

std::string interfaceAddress(const std::string& interfaceName) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || interfaceName != it->ifa_name) continue;
    if (it->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = formatSockaddr(it->ifa_addr, false);
    if (it->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) v6 = formatSockaddr(it->ifa_addr, false);
    }
  }
  freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

std::vector<std::string> interfaceNames() {
  std::vector<std::string> names;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return names;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if ((it->ifa_flags & IFF_UP) == 0) continue;
    if (std::find(names.begin(), names.end(), it->ifa_name) == names.end()) names.push_back(it->ifa_name);
  }
  freeifaddrs(list);
  return names;
}

std::string routableHostAddress() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(name, nullptr, &hints, &res) == 0) {
      std::string found;
      for (addrinfo* it = res; it != nullptr && found.empty(); it = it->ai_next) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(it->ai_addr);
        if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) found = formatSockaddr(it->ai_addr, false);
      }
      freeaddrinfo(res);
      if (!found.empty()) return found;
    }
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* it = list; it != nullptr && found.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) continue;
    found = formatSockaddr(it->ifa_addr, false);
  }
  freeifaddrs(list);
  return found;
}

std::string sourceAddressTowards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), "9", &hints, &res) != 0) return "";
  std::string found;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // connect() on a datagram socket only picks the route (and so the source address).
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) found = localIp(fd);
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return found == "0.0.0.0" ? "" : found;
}

void setNonBlocking(int fd, bool nonBlocking) {
  int flags = fcntl(fd, F_GETFL, 0);
  HVD_SYSCHECK(flags >= 0, "fcntl(F_GETFL)");
  flags = nonBlocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  HVD_SYSCHECK(fcntl(fd, F_SETFL, flags) == 0, "fcntl(F_SETFL)");
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void setLargeBuffers(int fd, int bytes) {
  if (bytes <= 0) return;
  // Unprivileged SO_SNDBUF is capped by net.core.wmem_max (often ~200 KiB), which is smaller
  // than what autotuning reaches by itself; only fix the size when it can really be raised.
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) return;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes));
}

void setKeepAlive(int fd, int idleSeconds, int intervalSeconds, int probes) {
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idleSeconds, sizeof(idleSeconds));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intervalSeconds, sizeof(intervalSeconds));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

Socket listenTcp(const std::string& host, uint16_t port, int backlog, int bufferBytes) {
  AddrInfoList addrs;
  resolve(host, port, true, addrs);
  std::string where = joinHostPort(host.empty() ? "0.0.0.0" : host, port);
  int lastErr = 0;
  for (addrinfo* ai = addrs.head; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      lastErr = errno;
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setLargeBuffers(s.fd(), bufferBytes);
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      lastErr = errno;
      continue;
    }
    setNonBlocking(s.fd(), true);
    return s;
  }
  throw Error("could not listen on " + where + ": " + errnoText(lastErr));
}

namespace {

// One non-blocking connect attempt to one resolved address. Returns 0 or the errno.
int connectOnce(const addrinfo* ai, Deadline deadline, int bufferBytes, Socket& out) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!s.valid()) return errno;
  setLargeBuffers(s.fd(), bufferBytes);
  if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    short revents = pollOne(s.fd(), POLLOUT, deadline);
    if (revents == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  setNonBlocking(s.fd(), false);
  out = std::move(s);
  return 0;
}

}  // namespace

Socket connectTcp(const std::string& host, uint16_t port, Deadline deadline, bool retry, int bufferBytes) {
  std::string where = joinHostPort(host, port);
  auto backoff = std::chrono::milliseconds(5);
  int lastErr = 0;
  std::string lastWhy;
  while (true) {
    AddrInfoList addrs;
    try {
      resolve(host, port, false, addrs);
    } catch (const Error& e) {
      if (!retry || deadline.expired()) throw;
      lastWhy = e.what();
      addrs.head = nullptr;
    }
    for (addrinfo* ai = addrs.head; ai != nullptr; ai = ai->ai_next) {
      Socket s;
      int err = connectOnce(ai, deadline, bufferBytes, s);
      if (err == 0) return s;
      lastErr = err;
      lastWhy = errnoText(err);
    }
    bool transient = lastErr == ECONNREFUSED || lastErr == ENETUNREACH || lastErr == EHOSTUNREACH ||
                     lastErr == ECONNRESET || lastErr == ECONNABORTED || lastErr == EAGAIN || lastErr == 0;
    if (deadline.expired() || lastErr == ETIMEDOUT) {
      // A connect that got no answer at all: the host is unreachable, or the listener's accept
      // queue is full (a flood of connections to that port drops new ones unanswered).
      std::string hint = lastErr == ETIMEDOUT ? "; no answer to the connection request: the host is unreachable or "
                                                "the port's accept queue is full (a flood of connections to it?)"
                                              : "";
      throw Timeout("timed out connecting to " + where +
                    (lastWhy.empty() ? "" : " (last error: " + lastWhy + hint + ")"));
    }
    if (!retry || !transient) throw Error("could not connect to " + where + ": " + lastWhy);
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(backoff, deadline.remaining()));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::milliseconds(200));
  }
}

Socket acceptTcp(int listenFd, Deadline deadline) {
  while (true) {
    int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      setNonBlocking(fd, false);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    HVD_SYSCHECK(errno == EAGAIN || errno == EWOULDBLOCK, "accept on " + localAddress(listenFd));
    if (pollOne(listenFd, POLLIN, deadline) == 0) {
      throw Timeout("timed out waiting for connections on " + localAddress(listenFd));
    }
  }
}

short pollOne(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    int rc = ::poll(&p, 1, deadline.pollTimeoutMs());
    if (rc > 0) return p.revents;
    if (rc == 0) {
      if (deadline.expired()) return 0;
      continue;
    }
    HVD_SYSCHECK(errno == EINTR, "poll");
  }
}

void sendAll(int fd, const void* data, size_t bytes, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (pollOne(fd, POLLOUT, deadline) == 0) throw Timeout("timed out sending to " + peerAddress(fd));
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET) throw SocketClosed("connection to " + peerAddress(fd) + " closed");
    HVD_SYSCHECK(false, "send to " + peerAddress(fd));
  }
}

void recvAll(int fd, void* data, size_t bytes, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw SocketClosed("connection closed by " + peerAddress(fd));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (pollOne(fd, POLLIN, deadline) == 0) throw Timeout("timed out receiving from " + peerAddress(fd));
      continue;
    }
    if (errno == ECONNRESET) throw SocketClosed("connection reset by " + peerAddress(fd));
    HVD_SYSCHECK(false, "recv from " + peerAddress(fd));
  }
}

void authenticateAsClient(int fd, const std::string& secret, const std::string& clientId,
                          const std::string& expectedServerId, Deadline deadline) {
  auth::ClientHandshake handshake(secret, clientId, expectedServerId);
  uint8_t challenge[auth::kChallengeBytes];
  recvAll(fd, challenge, sizeof(challenge), deadline);
  auto proof = handshake.respond(challenge, sizeof(challenge));
  if (!proof) throw AuthenticationRefused("peer " + peerAddress(fd) + " is not a Horovod endpoint (bad challenge)");
  // A server that drops the connection as busy may have closed it before our proof arrived: the
  // send then fails, but its busy notice can still be read.
  std::optional<SocketClosed> sendFailed;
  try {
    sendAll(fd, proof->data(), proof->size(), deadline);
  } catch (const SocketClosed& e) {
    sendFailed = e;
  }
  uint8_t answer[auth::kAnswerBytes];
  try {
    recvAll(fd, answer, sizeof(answer), deadline);
  } catch (const SocketClosed&) {
    if (sendFailed) throw *sendFailed;
    throw AuthenticationRefused("peer " + peerAddress(fd) +
                                " closed the connection after our proof: the job secret does not match");
  }
  if (auth::isBusyAnswer(answer, sizeof(answer))) {
    throw PeerBusy("peer " + peerAddress(fd) +
                   " dropped the connection before checking our proof: too many connections were waiting to "
                   "authenticate (a flood of connections to its port?)");
  }
  if (sendFailed) throw *sendFailed;
  if (!handshake.verifyAnswer(answer, sizeof(answer))) {
    throw AuthenticationRefused("peer " + peerAddress(fd) + " failed to prove the job secret (or is not '" +
                                expectedServerId + "')");
  }
}

std::string authenticateAsServer(int fd, const std::string& secret, const std::string& serverId, Deadline deadline) {
  auth::ServerHandshake handshake(secret, serverId);
  sendAll(fd, handshake.challenge().data(), handshake.challenge().size(), deadline);
  uint8_t header[2];
  recvAll(fd, header, sizeof(header), deadline);
  auto proofBytes = auth::ServerHandshake::proofBytes(header);
  if (!proofBytes) throw AuthenticationRefused("malformed handshake from " + peerAddress(fd));
  std::vector<uint8_t> proof(*proofBytes);
  proof[0] = header[0];
  proof[1] = header[1];
  recvAll(fd, proof.data() + 2, proof.size() - 2, deadline);
  std::vector<uint8_t> answer;
  auto clientId = handshake.verify(proof.data(), proof.size(), answer);
  if (!clientId) throw AuthenticationRefused("peer " + peerAddress(fd) + " failed to prove the job secret");
  sendAll(fd, answer.data(), answer.size(), deadline);
  return *clientId;
}

}  // namespace hvd
