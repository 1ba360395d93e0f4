// Socket helpers: listen/connect/accept with deadlines, exact I/O, addresses, the handshake.
#include "common/socket.h"

#include <gtest/gtest.h>

#include <thread>

namespace hvd {
namespace {

using namespace std::chrono_literals;

TEST(Socket, HostPortRoundTrip) {
  EXPECT_EQ(joinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(joinHostPort("::1", 9), "[::1]:9");
  EXPECT_EQ(splitHostPort("[::1]:9"), std::make_pair(std::string("::1"), uint16_t{9}));
  EXPECT_EQ(splitHostPort("host.example:1234"), std::make_pair(std::string("host.example"), uint16_t{1234}));
  EXPECT_THROW(splitHostPort("nocolon"), InvalidArgument);
  EXPECT_THROW(splitHostPort("h:70000"), InvalidArgument);
}

TEST(Socket, LoopbackInterfaceHasAnAddress) {
  EXPECT_EQ(interfaceAddress("lo"), "127.0.0.1");
  EXPECT_EQ(interfaceAddress("no-such-if0"), "");
}

TEST(Socket, SourceAddressTowardsFollowsTheRoute) {
  EXPECT_EQ(sourceAddressTowards("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(sourceAddressTowards("localhost"), "127.0.0.1");
  // An address of this host is reached from itself.
  const std::string own = routableHostAddress();
  if (!own.empty()) EXPECT_EQ(sourceAddressTowards(own), own);
  EXPECT_EQ(sourceAddressTowards(""), "");
  EXPECT_EQ(sourceAddressTowards("no-such-host.invalid"), "");
}

TEST(Socket, ConnectAcceptExchange) {
  Socket listener = listenTcp("127.0.0.1", 0, 16);
  uint16_t port = localPort(listener.fd());
  ASSERT_NE(port, 0);
  std::thread server([&] {
    Socket s = acceptTcp(listener.fd(), Deadline::after(5s));
    std::vector<uint8_t> buf(1 << 20);
    recvAll(s.fd(), buf.data(), buf.size(), Deadline::after(5s));
    sendAll(s.fd(), buf.data(), buf.size(), Deadline::after(5s));
  });
  Socket c = connectTcp("localhost", port, Deadline::after(5s), false);
  std::vector<uint8_t> out(1 << 20), in(1 << 20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7);
  sendAll(c.fd(), out.data(), out.size(), Deadline::after(5s));
  recvAll(c.fd(), in.data(), in.size(), Deadline::after(5s));
  server.join();
  EXPECT_EQ(in, out);
  EXPECT_EQ(splitHostPort(peerAddress(c.fd())).second, port);
}

TEST(Socket, DeadlinesAndClosedPeers) {
  Socket listener = listenTcp("127.0.0.1", 0, 16);
  EXPECT_THROW(acceptTcp(listener.fd(), Deadline::after(50ms)), Timeout);
  Socket c = connectTcp("127.0.0.1", localPort(listener.fd()), Deadline::after(5s), false);
  Socket s = acceptTcp(listener.fd(), Deadline::after(5s));
  uint8_t byte;
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(recvAll(c.fd(), &byte, 1, Deadline::after(100ms)), Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  s.close();
  EXPECT_THROW(recvAll(c.fd(), &byte, 1, Deadline::after(5s)), SocketClosed);
}

TEST(Socket, ConnectRefusedWithoutRetryFailsFast) {
  uint16_t port;
  {
    Socket listener = listenTcp("127.0.0.1", 0, 1);
    port = localPort(listener.fd());
  }
  EXPECT_THROW(connectTcp("127.0.0.1", port, Deadline::after(5s), false), Error);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(connectTcp("127.0.0.1", port, Deadline::after(200ms), true), Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(Socket, ConnectRetriesUntilListenerAppears) {
  uint16_t port;
  {
    Socket probe = listenTcp("127.0.0.1", 0, 1);
    port = localPort(probe.fd());
  }
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    Socket listener = listenTcp("127.0.0.1", port, 4);
    Socket s = acceptTcp(listener.fd(), Deadline::after(5s));
    uint8_t b = 42;
    sendAll(s.fd(), &b, 1, Deadline::after(5s));
  });
  Socket c = connectTcp("127.0.0.1", port, Deadline::after(5s), true);
  uint8_t got = 0;
  recvAll(c.fd(), &got, 1, Deadline::after(5s));
  late.join();
  EXPECT_EQ(got, 42);
}

void handshakePair(const std::string& serverSecret, const std::string& clientSecret, const std::string& expectedServer,
                   std::string* clientId, bool* serverRefused, bool* clientRefused) {
  Socket listener = listenTcp("127.0.0.1", 0, 4);
  std::thread server([&] {
    Socket s = acceptTcp(listener.fd(), Deadline::after(5s));
    try {
      *clientId = authenticateAsServer(s.fd(), serverSecret, "srv", Deadline::after(5s));
    } catch (const AuthenticationRefused&) {
      *serverRefused = true;
    }
  });
  Socket c = connectTcp("127.0.0.1", localPort(listener.fd()), Deadline::after(5s), false);
  try {
    authenticateAsClient(c.fd(), clientSecret, "client-1", expectedServer, Deadline::after(5s));
  } catch (const AuthenticationRefused&) {
    *clientRefused = true;
  }
  server.join();
}

TEST(Socket, HandshakeOverTcp) {
  std::string id;
  bool serverRefused = false, clientRefused = false;
  handshakePair("k", "k", "srv", &id, &serverRefused, &clientRefused);
  EXPECT_EQ(id, "client-1");
  EXPECT_FALSE(serverRefused);
  EXPECT_FALSE(clientRefused);

  id.clear();
  handshakePair("k", "bad", "srv", &id, &serverRefused, &clientRefused);
  EXPECT_TRUE(serverRefused);
  EXPECT_TRUE(clientRefused);
  EXPECT_EQ(id, "");

  serverRefused = clientRefused = false;
  handshakePair("k", "k", "other", &id, &serverRefused, &clientRefused);
  EXPECT_FALSE(serverRefused);
  EXPECT_TRUE(clientRefused);
}

}  // namespace
}  // namespace hvd
