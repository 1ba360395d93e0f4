// horovod._core.ElasticRounds (horovod/elastic_rounds.h): the elastic driver's policy for the
// worker pools of horovod.ray and horovod.spark (horovod/runner/elastic_driver.py runs the loop):
//   ElasticRounds(server: RendezvousServer, start_workers, min_workers, max_workers | None,
//                 reset_limit | None, elastic_timeout_s, gather_timeout_s, replace_grace_s, first_id,
//                 cooldown_range: (min_s, max_s) | None = None)
//   .capacity(room) .worker_landed(worker_id, host: str) .worker_exited(worker_id, success, how)
//   .fail(message) .tick() -> [ElasticAction] .members() -> [(worker_id, rank)]
//   .blacklisted(host) -> bool  .wants_room .keep_running .exit_code .next_id
//   ElasticAction: .kind ('log' | 'launch' | 'start' | 'kill' | 'finish') .id .host .text .reason
//       .needed .have, and the slot of a 'start': .rank .size .local_rank .local_size .cross_rank
//       .cross_size
// tick(), worker_exited() and fail() release the GIL (they use the store); a store failure is
// a ConnectionError. Bad settings are ValueErrors naming the argument.
#pragma once

#include <nanobind/nanobind.h>

namespace hvd::py {

void registerElasticRounds(nanobind::module_& m);

}  // namespace hvd::py
