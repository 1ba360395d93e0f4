// rendezvous_server: a standalone rendezvous service for ranks started by hand (bench/
// netns_shaped.sh starts one rank per network namespace without horovodrun).
//
//   rendezvous_server [--bind ADDR] [--port N] [--seconds S]
//
// The job secret is read from HOROVOD_SECRET_KEY (hex, as horovodrun passes it to workers).
// Prints "port <N>" on stdout once listening, then serves until SIGTERM/SIGINT or S seconds pass.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
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
  // Block the stop signals before the server's thread starts, so that only sigtimedwait sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  try {
    hvd::TcpStoreServer server(bind, static_cast<uint16_t>(port), secret);
    std::printf("port %u\n", unsigned(server.port()));
    std::fflush(stdout);
    timespec limit{static_cast<time_t>(seconds), static_cast<long>((seconds - double(time_t(seconds))) * 1e9)};
    sigtimedwait(&stop, nullptr, &limit);  // a stop signal or the time limit
  } catch (const hvd::Error& e) {
    std::cerr << "rendezvous_server: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
