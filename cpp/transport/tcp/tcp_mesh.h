// Connection setup of the TCP transport: every pair of ranks gets two authenticated TCP
// connections, one for the data plane and one for the control plane (mailbox).
//
// Rule: each rank listens on an ephemeral port and publishes "addr/<rank>" = "ip:port" in the
// context's store; a rank connects to every higher rank and accepts from every lower one
// (accepting runs on a helper thread while connecting, so no rank waits for another's turn).
// Every connection runs the handshake of common/hmac.h with the job secret; the connecting
// side's identity names its rank, the plane and the job, and the accepting side proves it is
// the rank the connector meant, so no connection can be attributed to the wrong peer or job. A
// connection that fails authentication is refused, logged with its address and counted; setup
// goes on waiting for the real peers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/socket.h"
#include "transport/transport.h"

namespace hvd::tcp {

struct MeshLinks {
  std::vector<Socket> data;     // indexed by rank; own entry invalid
  std::vector<Socket> control;  // likewise
  std::string listenAddress;    // what this rank published
  int64_t refused = 0;          // connections refused for failing authentication
};

// Where a rank listens and what it publishes, from bindAddress / interface / host layout:
//   bindAddress set            -> listen there, publish it (a wildcard publishes as below)
//   interface set              -> listen on and publish the interface's IP
//   all ranks on one host      -> listen on 0.0.0.0, publish 127.0.0.1
//   otherwise                  -> listen on 0.0.0.0, publish this host's address on the route to
//                                 reachableAddress (a non-loopback one), else the address its
//                                 host name resolves to (routableHostAddress)
// Throws InvalidArgument when the interface does not exist or has no address.
std::pair<std::string, std::string> chooseAddresses(const TransportContext& context);

// Collective over all ranks of the context; bounded by context.timeout. Returned sockets are
// connected, authenticated, non-blocking, with TCP_NODELAY and large buffers.
MeshLinks connectMesh(const TransportContext& context, int socketBufferBytes);

}  // namespace hvd::tcp
