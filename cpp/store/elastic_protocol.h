// The elastic rendezvous: how horovodrun's elastic driver and the workers agree on rounds, through
// the job's Store (the launcher's TcpStoreServer). Both sides use only this file's functions, so
// the keys and the value format live here and nowhere else.
//
// Every worker process has an id for its whole life (HOROVOD_ELASTIC_WORKER_ID, set at spawn).
// Keys, all under "elastic/":
//   inits/<id>       counter: how many times the worker has called init() (+1 per init)
//   events           counter: bumped after every inits/<id> change, so the driver can poll one key
//   assign/<id>/<k>  the answer to the worker's k-th init (k from 0): a Join (its place in a round),
//                    or Removed / Abort with the message the worker raises
//   updates          counter: host-set changes the driver announced
//   update/<i>       the i-th change's flags (kHostsRemoved | kHostsAdded), i from 1
//   suspect/<r>/<k>  counter: workers of round r whose engine lost rank k (a silent or dead peer)
//
// A worker's k-th init waits for assign/<id>/k; the driver writes assign/<id>/0 before it spawns
// the worker and assign/<id>/k (k > 0) when it forms the round after the worker asked again.
#pragma once

#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/placement.h"
#include "store/store.h"

namespace hvd::elastic {

enum HostUpdateFlags : int { kHostsRemoved = 1, kHostsAdded = 2 };

struct Assignment {
  enum class Kind { kJoin, kRemoved, kAbort };
  Kind kind = Kind::kJoin;
  // kJoin: the round (0, 1, ...) and this worker's place in it.
  int64_t round = 0;
  Placement placement{.rank = 0, .size = 0, .localRank = 0, .localSize = 0, .crossRank = 0, .crossSize = 0};
  // Host updates announced before the round formed (the round reacts only to later ones).
  int64_t updatesSeen = 0;
  // kRemoved / kAbort: what the worker's init() raises.
  std::string message;
};

std::string encodeAssignment(const Assignment& a);
// Throws hvd::Error on malformed text.
Assignment decodeAssignment(const std::string& text);

// ---- worker side ----

// Announces this init() and waits for the driver's answer (deadline: the elastic timeout).
Assignment requestAssignment(Store& store, const std::string& workerId, Deadline deadline);

struct HostUpdates {
  int64_t latest = 0;  // index of the newest announced change (0: none)
  int flags = 0;       // OR of the flags of the changes after `since`
};
// The host-set changes announced after index `since`.
HostUpdates readHostUpdates(Store& store, int64_t since, Deadline deadline);

// Before asking for its next round: this worker's engine lost rank `rank` of round `round`.
void reportSuspect(Store& store, int64_t round, int rank, Deadline deadline);

// ---- driver side ----

// Whether some worker reported rank `rank` of round `round` as lost.
bool isSuspect(Store& store, int64_t round, int rank, Deadline deadline);

// The events counter (changes whenever some worker asked for an assignment).
int64_t readEvents(Store& store, Deadline deadline);
// How many times the worker has called init().
int64_t readInits(Store& store, const std::string& workerId, Deadline deadline);
void publishAssignment(Store& store, const std::string& workerId, int64_t k, const Assignment& a, Deadline deadline);
// Announces a host-set change; returns its index.
int64_t announceHostUpdate(Store& store, int flags, Deadline deadline);
int64_t readUpdateCount(Store& store, Deadline deadline);

}  // namespace hvd::elastic
