// flood_hammer: bench/flood_hammer.py's connection flood, in C++, for the rates a Python loop
// cannot reach (the Python hammer tops out near 50,000 connections a second on 2 cores).
//
//   flood_hammer HOST PORT [--seconds S] [--procs N] [--holders H] [--rate R]
//                [--stop-file F] [--started-file F]
//
// Same contract and output line as the Python hammer: each of --procs processes (processes, not
// threads: threads of one process serialize on its descriptor table) first opens
// --holders connections and keeps them open and idle until the end, then opens connections as
// fast as it can (or --rate a second in all) and sends nothing, each reset at once (SO_LINGER 0,
// so that TIME_WAIT does not exhaust local ports). It stops after --seconds or as soon as
// --stop-file exists; process i creates <started-file>.i after its holders and its first 200
// flood connections. Prints "flood: <n> connections in <s> s (<rate>/s), <held> held, <failed>
// failed connects".
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  sockaddr_storage addr{};
  socklen_t addrLen = 0;
  double seconds = 5;
  int procs = 2;
  int holders = 100;
  double rate = 0;  // connections a second in all; 0: as fast as possible
  std::string stopFile, startedFile;
};

struct Counts {
  long opened = 0, held = 0, failed = 0;
  double seconds = 0;
};

bool exists(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

int openSocket(const Options& o, bool blocking) {
  int fd = ::socket(o.addr.ss_family, SOCK_STREAM | (blocking ? 0 : SOCK_NONBLOCK), 0);
  return fd;
}

void hammer(const Options& o, int index, Counts* out) {
  std::vector<int> held;
  while (static_cast<int>(held.size()) < o.holders && !exists(o.stopFile)) {
    int fd = openSocket(o, true);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&o.addr), o.addrLen) == 0) {
      held.push_back(fd);
      continue;
    }
    if (fd >= 0) ::close(fd);
    ++out->failed;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const linger reset{1, 0};
  const double perProc = o.rate / o.procs;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  long opened = 0;
  for (;;) {
    const auto now = Clock::now();
    if (now >= end || (opened % 1024 == 0 && exists(o.stopFile))) break;
    if (perProc > 0 && opened > perProc * std::chrono::duration<double>(now - start).count()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    int fd = openSocket(o, false);
    if (fd < 0) {
      ++out->failed;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&o.addr), o.addrLen) != 0 && errno != EINPROGRESS) {
      ++out->failed;
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++opened;
    if (opened == 200 && !o.startedFile.empty()) {
      std::string path = o.startedFile + "." + std::to_string(index);
      int f = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
      if (f >= 0) ::close(f);
    }
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(fd);
  }
  out->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (int fd : held) ::close(fd);
  out->held = static_cast<long>(held.size());
  out->opened = opened + out->held;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "flood_hammer: %s\nusage: flood_hammer HOST PORT [--seconds S] [--procs N] [--holders H] "
               "[--rate R] [--stop-file F] [--started-file F]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  if (argc < 3) usage("HOST and PORT are required");
  Options o;
  const int port = std::atoi(argv[2]);
  if (port <= 0 || port > 65535) usage("PORT must be 1-65535");
  auto* v4 = reinterpret_cast<sockaddr_in*>(&o.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&o.addr);
  if (::inet_pton(AF_INET, argv[1], &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    o.addrLen = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, argv[1], &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    o.addrLen = sizeof(sockaddr_in6);
  } else {
    usage("HOST must be a numeric IPv4 or IPv6 address");
  }
  for (int i = 3; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--seconds") o.seconds = std::atof(value);
    else if (flag == "--procs") o.procs = std::atoi(value);
    else if (flag == "--holders") o.holders = std::atoi(value);
    else if (flag == "--rate") o.rate = std::atof(value);
    else if (flag == "--stop-file") o.stopFile = value;
    else if (flag == "--started-file") o.startedFile = value;
    else usage(("unknown flag " + flag).c_str());
  }
  if (o.procs < 1 || o.holders < 0 || !(o.seconds > 0) || o.rate < 0) usage("bad flag value");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int pipeFds[2];
  if (::pipe(pipeFds) != 0) usage("pipe() failed");
  std::vector<pid_t> children;
  for (int i = 0; i < o.procs; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) usage("fork() failed");
    if (pid == 0) {
      Counts c;
      hammer(o, i, &c);
      // One record per child, far below PIPE_BUF: written atomically.
      const bool ok = ::write(pipeFds[1], &c, sizeof(c)) == static_cast<ssize_t>(sizeof(c));
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(pipeFds[1]);
  Counts all;
  Counts c;
  while (::read(pipeFds[0], &c, sizeof(c)) == static_cast<ssize_t>(sizeof(c))) {
    all.opened += c.opened;
    all.held += c.held;
    all.failed += c.failed;
    all.seconds = std::max(all.seconds, c.seconds);
  }
  for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
  std::printf("flood: %ld connections in %.1f s (%.0f/s), %ld held, %ld failed connects\n", all.opened, all.seconds,
              all.seconds > 0 ? all.opened / all.seconds : 0.0, all.held, all.failed);
  return 0;
}
