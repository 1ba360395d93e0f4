// rendezvous_server: a standalone rendezvous service for ranks started by hand (bench/
// netns_shaped.sh starts one rank per network namespace without horovodrun).
//
//   rendezvous_server [--bind ADDR] [--port N] [--seconds S]
//
// The job secret is read from HOROVOD_SECRET_KEY (hex, as horovodrun passes it to workers).
// Prints "port <N>" on stdout once listening, then serves until stdin closes or S seconds pass.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "horovod/errors.h"
#include "store/tcp_store_server.h"

int main(int argc, char** argv) {
  std::string bind = "0.0.0.0";
  int port = 0;
  double seconds = 600;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--bind") bind = argv[i + 1];
    else if (flag == "--port") port = std::atoi(argv[i + 1]);
    else if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else {
      std::cerr << "usage: " << argv[0] << " [--bind ADDR] [--port N] [--seconds S]\n";
      return 2;
    }
  }
  const char* secret = std::getenv("HOROVOD_SECRET_KEY");
  if (!secret || !*secret) {
    std::cerr << "rendezvous_server: set HOROVOD_SECRET_KEY\n";
    return 2;
  }
  try {
    hvd::TcpStoreServer server(bind, static_cast<uint16_t>(port), secret);
    std::printf("port %u\n", unsigned(server.port()));
    std::fflush(stdout);
    // Serve until stdin reaches end of file (the parent script closes it) or the time is up.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd in{0, POLLIN, 0};
      int ready = poll(&in, 1, 200);
      if (ready > 0) {
        char buf[64];
        if (read(0, buf, sizeof buf) <= 0) break;
      }
    }
  } catch (const hvd::Error& e) {
    std::cerr << "rendezvous_server: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
