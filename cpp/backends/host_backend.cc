#include "backends/host_backend.h"

#include "collectives/reduce.h"
#include "engine/fused_layout.h"

namespace hvd::backends {

void scale(void* buf, size_t count, DataType dtype, double factor) {
  if (factor != 1.0 && count > 0) scaleBuffer(buf, count, dtype, factor);
}

HostBackendBase::HostBackendBase(const char* name, const BackendContext& context, engine::Completion completion)
    : CollectiveBackend(completion),
      host_(context.host),
      observers_(context.observers),
      name_(name),
      counters_(context.counters) {}

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

uint8_t* HostBackendBase::packFused(const Response& r, const std::vector<Entry*>& entries, size_t total,
                                    DataType dtype) {
  uint8_t* buf = bytesOf(host_.fusion.reserve(total));
  notifyIf(EngineEventKind::kFusionCopyInStart, r, static_cast<int64_t>(total), nullptr);
  engine::packTensors(r, entries, buf);
  scale(buf, total / dataTypeSize(dtype), dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, static_cast<int64_t>(total), nullptr);
  return buf;
}

void HostBackendBase::unpackFused(const Response& r, const std::vector<Entry*>& entries, const uint8_t* buf,
                                  size_t total) {
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, static_cast<int64_t>(total), nullptr);
  engine::unpackTensors(r, entries, buf);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, static_cast<int64_t>(total), nullptr);
}

}  // namespace hvd::backends
