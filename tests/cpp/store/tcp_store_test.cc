// TcpStoreServer + TcpStore specifics: authentication, errors naming the server, shutdown.
#include <gtest/gtest.h>

#include <thread>

#include "common/socket.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TcpStore, WrongSecretIsRefusedCountedAndLogged) {
  TcpStoreServer server("127.0.0.1", 0, "right-secret");
  testing::internal::CaptureStderr();
  std::string what;
  try {
    TcpStore bad("127.0.0.1", server.port(), "wrong-secret", Deadline::after(5s));
    FAIL() << "connected with a wrong secret";
  } catch (const StoreError& e) {
    what = e.what();
  }
  // The server logs from its own thread; give it a moment to finish the line.
  for (int i = 0; i < 100 && server.refusedConnections() == 0; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(20ms);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(what.find("rendezvous server at 127.0.0.1:" + std::to_string(server.port()) + " refused authentication"),
            std::string::npos)
      << what;
  EXPECT_EQ(server.refusedConnections(), 1);
  EXPECT_NE(log.find("refused a connection from 127.0.0.1:"), std::string::npos) << log;

  // A correct client still works, and nothing the refused one could have sent was applied.
  TcpStore good("127.0.0.1", server.port(), "right-secret", Deadline::after(5s));
  good.set("k", {1}, Deadline::after(5s));
  EXPECT_EQ(good.get("k", Deadline::after(5s)), Bytes{1});
  EXPECT_EQ(server.refusedConnections(), 1);
}

TEST(TcpStore, UnauthenticatedRequestsAreNeverApplied) {
  TcpStoreServer server("127.0.0.1", 0, "s");
  // Speak the request protocol without the handshake: a raw set frame in place of the proof.
  Socket raw = connectTcp("127.0.0.1", server.port(), Deadline::after(5s), false);
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(store_wire::Op::kSet)).str32("injected").str32("evil");
  auto frame = w.finish();
  frame.resize(frame.size() + 512, 0);  // enough bytes to be read as a (bogus) proof
  testing::internal::CaptureStderr();
  sendAll(raw.fd(), frame.data(), frame.size(), Deadline::after(5s));
  // The server answers with its challenge and then drops us.
  std::vector<uint8_t> sink(4096);
  bool closed = false;
  for (int i = 0; i < 50 && !closed; ++i) {
    try {
      recvAll(raw.fd(), sink.data(), 1, Deadline::after(5s));
    } catch (const SocketClosed&) {
      closed = true;
    }
  }
  testing::internal::GetCapturedStderr();
  EXPECT_TRUE(closed);
  EXPECT_EQ(server.refusedConnections(), 1);
  TcpStore good("127.0.0.1", server.port(), "s", Deadline::after(5s));
  EXPECT_THROW(good.get("injected", Deadline::after(100ms)), Timeout);
}

TEST(TcpStore, UnreachableServerNamesTheAddress) {
  uint16_t port;
  {
    Socket probe = listenTcp("127.0.0.1", 0, 1);
    port = localPort(probe.fd());
  }
  auto start = std::chrono::steady_clock::now();
  std::string what = errorOf([&] { TcpStore s("127.0.0.1", port, "x", Deadline::after(300ms)); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_NE(what.find("could not connect to rendezvous server at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << what;
  EXPECT_THROW(TcpStore("127.0.0.1", port, "x", Deadline::after(100ms)), StoreError);
}

TEST(TcpStore, ClientWaitsForALateServer) {
  uint16_t port;
  {
    Socket probe = listenTcp("127.0.0.1", 0, 1);
    port = localPort(probe.fd());
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port, "s");
  });
  TcpStore client("127.0.0.1", port, "s", Deadline::after(10s));
  late.join();
  client.set("a", {2}, Deadline::after(5s));
  EXPECT_EQ(client.get("a", Deadline::after(5s)), Bytes{2});
  EXPECT_EQ(client.localIpTowardsServer(), "127.0.0.1");
}

TEST(TcpStore, PortInUseIsAnErrorNamingTheAddress) {
  TcpStoreServer first("127.0.0.1", 0, "s");
  std::string what = errorOf([&] { TcpStoreServer second("127.0.0.1", first.port(), "s"); });
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << what;
}

TEST(TcpStore, ServerShutdownFailsBlockedClients) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "s");
  TcpStore client("127.0.0.1", server->port(), "s", Deadline::after(5s));
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client.get("never", Deadline::after(20s)), StoreError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  stopper.join();
}

TEST(TcpStore, ServerSideTimeoutAnswersWithMissingKeys) {
  TcpStoreServer server("127.0.0.1", 0, "s");
  TcpStore client("127.0.0.1", server.port(), "s", Deadline::after(5s));
  client.set("have", {1}, Deadline::after(5s));
  std::string what = errorOf([&] { client.wait({"have", "lacking"}, Deadline::after(150ms)); });
  EXPECT_NE(what.find("'lacking'"), std::string::npos) << what;
  EXPECT_NE(what.find("rendezvous server at 127.0.0.1:"), std::string::npos) << what;
  EXPECT_EQ(what.find("'have'"), std::string::npos) << what;
}

TEST(TcpStore, ConcurrentBlockingGetAndSetThroughOneClient) {
  // One TcpStore shared by two threads: the blocked get must not block the set.
  TcpStoreServer server("127.0.0.1", 0, "s");
  TcpStore client("127.0.0.1", server.port(), "s", Deadline::after(5s));
  std::thread getter([&] { EXPECT_EQ(getString(client, "x", Deadline::after(10s)), "y"); });
  std::this_thread::sleep_for(50ms);
  setString(client, "x", "y", Deadline::after(2s));
  getter.join();
}

}  // namespace
}  // namespace hvd
