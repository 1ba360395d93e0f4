// horovod._core's rendezvous classes (horovod/rendezvous.h) for horovod.runner.rendezvous, which
// horovod.ray and horovod.spark use to serve their jobs' stores:
//   RendezvousServer(secret: bytes, bind_host: str, port: int)   .port .refused .shutdown()
//       .set(key, value: bytes) .add(key, delta) -> int .try_get(key) -> bytes | None
//       (the driver's side of the elastic rendezvous: ElasticRounds, elastic_rounds.h)
//   RendezvousClient(host, port, secret: bytes, connect_timeout_s: float)
//       .set(key, value) .add(key, delta) .get(key, timeout_s) -> bytes | None
// Every call releases the GIL while it talks to the server. Errors: OSError when the server
// cannot listen; RendezvousSecretRefused (a ConnectionError) when a client's secret is refused;
// ConnectionError for any other store failure (unreachable, closed, shut down).
#pragma once

#include <nanobind/nanobind.h>

namespace hvd::py {

void registerRendezvous(nanobind::module_& m);

}  // namespace hvd::py
