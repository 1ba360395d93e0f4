// Socket utilities with deadlines: an owning fd, TCP listen/connect/accept, exact-length I/O,
// address formatting and resolution, interface -> IP lookup, and the authenticated handshake of
// hmac.h run over a blocking exchange. Used by the TCP store and the TCP transport; knows
// nothing about either.
//
// Every function that can block takes a Deadline and throws hvd::Timeout when it passes.
// System failures throw hvd::Error with the errno text; a peer that closes the connection in
// the middle of an exchange throws SocketClosed (an hvd::Error).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "horovod/errors.h"

namespace hvd {

// The peer closed (or reset) the connection.
class SocketClosed : public Error {
  using Error::Error;
};

// Owns one file descriptor; closes it on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void close();

 private:
  int fd_ = -1;
};

// "host:port" with IPv6 hosts bracketed; splitHostPort is its inverse (throws InvalidArgument).
std::string joinHostPort(const std::string& host, uint16_t port);
std::pair<std::string, uint16_t> splitHostPort(const std::string& address);

// Numeric address of a connected/bound socket's peer or local end, "ip:port".
std::string peerAddress(int fd);
std::string localAddress(int fd);
std::string localIp(int fd);  // without the port
uint16_t localPort(int fd);

// The first IPv4 address of a network interface (IPv6 if it has no IPv4), or "" if the
// interface does not exist or has no address.
std::string interfaceAddress(const std::string& interfaceName);
// Names of interfaces that are up, for error messages.
std::vector<std::string> interfaceNames();
// A non-loopback IPv4 address of this host: the one the host name resolves to if that is not
// loopback, else the first up, non-loopback interface's; "" if none.
std::string routableHostAddress();
// This host's IPv4 address on the route to `host` (an IPv4 address or a name): the source
// address the kernel would give a connection there. Sends nothing. "" when `host` does not
// resolve or there is no route.
std::string sourceAddressTowards(const std::string& host);

void setNonBlocking(int fd, bool nonBlocking);
void setNoDelay(int fd);
// Best effort: large kernel buffers (SO_SNDBUFFORCE/SO_RCVBUFFORCE when privileged); leaves the
// kernel's autotuning alone when it cannot raise them above what autotuning reaches anyway.
void setLargeBuffers(int fd, int bytes);
// Keepalive probes so that a silent peer host is noticed on idle links, and a user timeout
// for unacknowledged data.
void setKeepAlive(int fd, int idleSeconds, int intervalSeconds, int probes);

// Listens on host:port (host "" or "0.0.0.0" = any IPv4; "::" = any IPv6; port 0 = ephemeral).
// Throws hvd::Error naming the address on failure. `bufferBytes` > 0 applies setLargeBuffers
// to the listening socket (accepted sockets inherit it).
Socket listenTcp(const std::string& host, uint16_t port, int backlog, int bufferBytes = 0);

// Connects to host:port (name or numeric). Retries refused/unreachable attempts until the
// deadline when `retry` is set (the listener may not be up yet). Throws hvd::Timeout or
// hvd::Error; messages include the address. The socket is returned in blocking mode.
Socket connectTcp(const std::string& host, uint16_t port, Deadline deadline, bool retry, int bufferBytes = 0);

// Accepts one connection (blocking mode). Throws hvd::Timeout on deadline.
Socket acceptTcp(int listenFd, Deadline deadline);

// Waits for `events` on fd; returns revents, or 0 on deadline. EINTR is retried.
short pollOne(int fd, short events, Deadline deadline);

// Exact-length I/O on a blocking or non-blocking socket, bounded by the deadline.
void sendAll(int fd, const void* data, size_t bytes, Deadline deadline);
void recvAll(int fd, void* data, size_t bytes, Deadline deadline);

// Runs the handshake of hmac.h over a connected socket.
// Client: throws AuthenticationRefused if the server closed the connection after our proof
// (wrong secret) or its answer did not verify (impostor or wrong peer), and PeerBusy if the server
// dropped the connection before checking the proof because too many handshakes were pending
// (auth::busyAnswer(): a flood of connections; connecting again may succeed).
class AuthenticationRefused : public Error {
  using Error::Error;
};
class PeerBusy : public Error {
  using Error::Error;
};
void authenticateAsClient(int fd, const std::string& secret, const std::string& clientId,
                          const std::string& expectedServerId, Deadline deadline);
// Server: returns the client's authenticated identity; throws AuthenticationRefused (after
// which the caller closes the socket) if its proof does not verify.
std::string authenticateAsServer(int fd, const std::string& secret, const std::string& serverId, Deadline deadline);

}  // namespace hvd
