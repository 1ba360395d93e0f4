// Elastic jobs under horovodrun: every init() of a worker joins a round formed by the launcher's
// elastic driver (store/elastic_protocol.h). joinElasticRound asks the driver for this worker's
// place in its next round and writes it into the Config (rank, size, local and cross ranks,
// elasticRound), overriding what the environment said; the Runtime then rendezvouses under that
// round's keys.
#pragma once

#include "engine/config.h"
#include "store/elastic_protocol.h"

namespace hvd::engine {

// No-op unless config.elasticWorkerId is set. Blocks until the driver answers (bounded by
// config.elasticTimeout plus a minute). Throws hvd::Error with the driver's message when this
// worker was removed from the job ("<host>[<local_rank>] has been removed from elastic job") or
// the job is ending, and StoreError / Timeout when the driver cannot be reached.
// `suspect`: the rank of the previous round this worker's engine lost (or -1), reported first so
// that the driver removes a silent worker at once instead of after its gather timeout.
void joinElasticRound(Config& config, int64_t previousRound = -1, int suspect = -1);

}  // namespace hvd::engine
