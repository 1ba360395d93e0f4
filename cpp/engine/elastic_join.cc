#include "engine/elastic_join.h"

#include <memory>

#include "horovod/errors.h"
#include "store/tcp_store.h"

namespace hvd::engine {
namespace {

std::unique_ptr<TcpStore> connect(const Config& config, Deadline deadline) {
  if (config.rendezvousAddr.empty()) {
    throw InvalidArgument(
        "HOROVOD_ELASTIC_WORKER_ID is set but HOROVOD_GLOO_RENDEZVOUS_ADDR is not: elastic workers "
        "are started by horovodrun's elastic driver");
  }
  return std::make_unique<TcpStore>(config.rendezvousAddr, static_cast<uint16_t>(config.rendezvousPort), config.secret,
                                    deadline);
}

}  // namespace

void joinElasticRound(Config& config, int64_t previousRound, int suspect) {
  if (config.elasticWorkerId.empty()) return;
  Deadline deadline = Deadline::after(config.elasticTimeout + std::chrono::minutes(1));
  auto store = connect(config, Deadline::after(config.timeout));
  if (previousRound >= 0 && suspect >= 0) elastic::reportSuspect(*store, previousRound, suspect, deadline);
  elastic::Assignment a = elastic::requestAssignment(*store, config.elasticWorkerId, deadline);
  if (a.kind == elastic::Assignment::Kind::kRemoved) throw RemovedFromJob(a.message);
  if (a.kind != elastic::Assignment::Kind::kJoin) throw Error(a.message);
  static_cast<Placement&>(config) = a.placement;
  config.elasticRound = a.round;
  config.elasticUpdatesSeen = a.updatesSeen;
}

}  // namespace hvd::engine
