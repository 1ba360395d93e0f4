// horovod._core.ElasticRounds (horovod/elastic_rounds.h): the elastic driver's policy for the
// worker pools of horovod.ray and horovod.spark (horovod/runner/elastic_driver.py runs the loop):
//   ElasticBlacklist(cooldown_range: (min_s, max_s) | None = None)  .blacklisted(host) -> bool
//       .advance_clock(seconds)   (kept by the owner across jobs, as the hosts are)
//   ElasticRounds(server: RendezvousServer, blacklist: ElasticBlacklist, start_workers,
//                 min_workers, max_workers | None, reset_limit | None, elastic_timeout_s,
//                 gather_timeout_s, replace_grace_s, first_id)
//   .capacity(room) .worker_landed(worker_id, host: str) .worker_exited(worker_id, success, how)
//   .fail(message) .tick() -> [ElasticAction] .members() -> [(worker_id, rank)]
//   .wants_room .keep_running .exit_code .next_id
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
