// Network facts the launcher needs: which hosts are this machine, which local address the
// remote hosts can reach, and which interface holds it. IPv4 only, like Horovod's launcher.
#pragma once

#include <string>
#include <vector>

namespace hvd::launcher {

// True if `host` is this machine: "localhost", this machine's host name, or a name/address
// resolving to a loopback address or to an address of one of this machine's interfaces.
// A name that does not resolve is treated as remote (ssh may know it from ~/.ssh/config).
bool isLocalHost(const std::string& host);

// Interfaces that are up, with their first IPv4 address.
struct Interface {
  std::string name;
  std::string ipv4;
};
std::vector<Interface> upInterfaces();

// The rendezvous address and interfaces to give the workers.
struct NetworkChoice {
  std::string driverAddress;        // HOROVOD_GLOO_RENDEZVOUS_ADDR
  std::vector<std::string> nics;    // HOROVOD_GLOO_IFACE = nics[0], NCCL_SOCKET_IFNAME = joined
  // True when the interfaces were detected on this machine (not named by the user): their
  // names say nothing about the remote hosts, so remote workers find their own (spawn_ssh.h).
  bool detected = false;
};

// requestedNics: --network-interface(s) (checked to exist and hold an IPv4 address; the first
// one's address is the driver address). Otherwise: all-local jobs use 127.0.0.1 and the
// interface holding it; jobs with remote hosts use the local source address of the route to the
// first remote host that resolves (a UDP connect(), no packet is sent) and its interface; if
// none resolves, the default route's source address, else the first non-loopback address.
// Throws UsageError naming the interface or address that is missing.
NetworkChoice chooseNetwork(const std::vector<std::string>& requestedNics, const std::vector<std::string>& remoteHosts);

}  // namespace hvd::launcher
