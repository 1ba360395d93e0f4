#include "backends/host_backend.h"

#include "collectives/reduce.h"

namespace hvd::backends {

void scale(void* buf, size_t count, DataType dtype, double factor) {
  if (factor != 1.0 && count > 0) scaleBuffer(buf, count, dtype, factor);
}

HostBackendBase::HostBackendBase(const char* name, const BackendContext& context)
    : host_(context.host), observers_(context.observers), name_(name), counters_(context.counters) {}

bool HostBackendBase::supports(Kind kind) const {
  switch (kind) {
    case Kind::kAllreduce:
    case Kind::kAllgather:
    case Kind::kBroadcast:
    case Kind::kAlltoall:
    case Kind::kReducescatter:
    case Kind::kBarrier: return true;
    default: return false;
  }
}

void HostBackendBase::notify(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm,
                             int64_t timeNs) const {
  engine::EngineEvent e;
  e.kind = kind;
  e.timeNs = timeNs;
  e.processSet = r.params.processSet;
  e.op = r.params.kind;
  e.tensors = engine::TensorNames::of(r.tensors);
  e.bytes = bytes;
  e.algorithm = algorithm;
  e.backend = name_;
  observers_.publish(e);
}

}  // namespace hvd::backends
