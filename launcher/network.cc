#include "network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "options.h"

namespace hvd::launcher {
namespace {

std::string ipv4Text(const sockaddr* addr) {
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, buf, sizeof(buf));
  return buf;
}

std::string ipv6Text(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, buf, sizeof(buf));
  return buf;
}

// Every address of every local interface (IPv4 and IPv6), as text.
std::vector<std::string> localAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family == AF_INET) out.push_back(ipv4Text(it->ifa_addr));
    if (it->ifa_addr->sa_family == AF_INET6) out.push_back(ipv6Text(it->ifa_addr));
  }
  freeifaddrs(list);
  return out;
}

// Numeric addresses `host` resolves to (empty if it does not resolve).
std::vector<std::string> resolve(const std::string& host, int family) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return out;
  for (addrinfo* it = result; it != nullptr; it = it->ai_next) {
    if (it->ai_family == AF_INET) out.push_back(ipv4Text(it->ai_addr));
    if (it->ai_family == AF_INET6) out.push_back(ipv6Text(it->ai_addr));
  }
  freeaddrinfo(result);
  return out;
}

// Local source address of the route to `ip` (IPv4), or "" if there is none.
std::string routeSource(const std::string& ip) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // discard; connect() on UDP only picks a route, nothing is sent
  std::string source;
  if (inet_pton(AF_INET, ip.c_str(), &to.sin_addr) == 1 &&
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      source = ipv4Text(reinterpret_cast<sockaddr*>(&local));
    }
  }
  close(fd);
  return source;
}

std::string interfaceHolding(const std::string& ip) {
  for (const auto& itf : upInterfaces()) {
    if (itf.ipv4 == ip) return itf.name;
  }
  return "";
}

std::string describeInterfaces() {
  std::string out;
  for (const auto& itf : upInterfaces()) {
    out += (out.empty() ? "" : ", ") + itf.name + (itf.ipv4.empty() ? "" : " (" + itf.ipv4 + ")");
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<Interface> upInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if ((it->ifa_flags & IFF_UP) == 0) continue;
    std::string name = it->ifa_name;
    Interface* entry = nullptr;
    for (auto& e : out) {
      if (e.name == name) entry = &e;
    }
    if (entry == nullptr) {
      out.push_back({name, ""});
      entry = &out.back();
    }
    if (entry->ipv4.empty() && it->ifa_addr != nullptr && it->ifa_addr->sa_family == AF_INET) {
      entry->ipv4 = ipv4Text(it->ifa_addr);
    }
  }
  freeifaddrs(list);
  return out;
}

bool isLocalHost(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  auto addresses = resolve(host, AF_UNSPEC);
  if (addresses.empty()) return false;
  auto local = localAddresses();
  for (const auto& a : addresses) {
    if (a.rfind("127.", 0) == 0 || a == "::1") return true;
    for (const auto& l : local) {
      if (a == l) return true;
    }
  }
  return false;
}

NetworkChoice chooseNetwork(const std::vector<std::string>& requestedNics,
                            const std::vector<std::string>& remoteHosts) {
  NetworkChoice choice;
  if (!requestedNics.empty()) {
    auto interfaces = upInterfaces();
    for (const auto& nic : requestedNics) {
      bool found = false;
      for (const auto& itf : interfaces) {
        if (itf.name == nic) {
          found = true;
          if (choice.driverAddress.empty()) choice.driverAddress = itf.ipv4;
        }
      }
      if (!found) {
        throw UsageError("network interface " + nic + " does not exist or is down (available: " + describeInterfaces() +
                         ")");
      }
      choice.nics.push_back(nic);
    }
    if (choice.driverAddress.empty()) {
      throw UsageError("network interface " + requestedNics[0] + " has no IPv4 address");
    }
    return choice;
  }
  choice.detected = true;
  if (remoteHosts.empty()) {
    std::string lo = interfaceHolding("127.0.0.1");
    if (lo.empty()) throw UsageError("No interface is found for address 127.0.0.1.");
    choice.driverAddress = "127.0.0.1";
    choice.nics.push_back(lo);
    return choice;
  }
  for (const auto& host : remoteHosts) {
    for (const auto& ip : resolve(host, AF_INET)) {
      std::string source = routeSource(ip);
      if (source.empty()) continue;
      std::string nic = interfaceHolding(source);
      choice.driverAddress = source;
      if (!nic.empty()) choice.nics.push_back(nic);
      return choice;
    }
  }
  // No remote host resolves here (ssh may know them from ~/.ssh/config): take the source of the
  // default route (no packet is sent), else the first non-loopback interface.
  std::string fallback = routeSource("192.0.2.1");
  if (fallback.empty() || fallback.rfind("127.", 0) == 0) {
    fallback.clear();
    for (const auto& itf : upInterfaces()) {
      if (!itf.ipv4.empty() && itf.ipv4.rfind("127.", 0) != 0) {
        fallback = itf.ipv4;
        break;
      }
    }
  }
  if (fallback.empty()) {
    throw UsageError(
        "cannot find a local address the remote hosts can reach; name an interface with "
        "--network-interface (available: " +
        describeInterfaces() + ")");
  }
  choice.driverAddress = fallback;
  std::string nic = interfaceHolding(fallback);
  if (!nic.empty()) choice.nics.push_back(nic);
  return choice;
}

}  // namespace hvd::launcher
