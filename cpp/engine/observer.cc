#include "engine/observer.h"

#include <algorithm>
#include <exception>

#include "common/logging.h"

namespace hvd::engine {

const char* eventKindName(EngineEventKind kind) {
  switch (kind) {
    case EngineEventKind::kEnqueue: return "ENQUEUE";
    case EngineEventKind::kCacheHit: return "CACHE_HIT";
    case EngineEventKind::kTensorDone: return "TENSOR_DONE";
    case EngineEventKind::kNegotiateStart: return "NEGOTIATE_START";
    case EngineEventKind::kNegotiateRank: return "NEGOTIATE_RANK";
    case EngineEventKind::kNegotiateEnd: return "NEGOTIATE_END";
    case EngineEventKind::kFusionCopyInStart: return "FUSION_COPY_IN_START";
    case EngineEventKind::kFusionCopyInEnd: return "FUSION_COPY_IN_END";
    case EngineEventKind::kCollectiveStart: return "COLLECTIVE_START";
    case EngineEventKind::kCollectiveEnd: return "COLLECTIVE_END";
    case EngineEventKind::kFusionCopyOutStart: return "FUSION_COPY_OUT_START";
    case EngineEventKind::kFusionCopyOutEnd: return "FUSION_COPY_OUT_END";
    case EngineEventKind::kStallTick: return "STALL_TICK";
    case EngineEventKind::kProcessSetAdded: return "PROCESS_SET_ADDED";
    case EngineEventKind::kProcessSetRemoved: return "PROCESS_SET_REMOVED";
    case EngineEventKind::kCycleStart: return "CYCLE_START";
    case EngineEventKind::kKnobsApplied: return "KNOBS_APPLIED";
    case EngineEventKind::kCount: break;
  }
  return "UNKNOWN";
}

TensorNames TensorNames::one(const std::string& name) {
  TensorNames n;
  n.source_ = &name;
  n.count_ = 1;
  n.at_ = [](const void* source, size_t) { return std::string_view(*static_cast<const std::string*>(source)); };
  return n;
}

TensorNames TensorNames::of(const std::vector<TensorInfo>& tensors) {
  TensorNames n;
  n.source_ = &tensors;
  n.count_ = tensors.size();
  n.at_ = [](const void* source, size_t i) {
    return std::string_view((*static_cast<const std::vector<TensorInfo>*>(source))[i].data().name);
  };
  return n;
}

int64_t ObserverHub::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const ObserverHub& ObserverHub::none() {
  static const ObserverHub hub;
  return hub;
}

void ObserverHub::add(std::shared_ptr<EngineObserver> observer) {
  if (!observer) return;
  Subscriber s;
  s.mask = observer->interests() & kAllEvents;
  s.tickMs = observer->stallTickInterval().count();
  if (s.tickMs <= 0) s.mask &= ~eventBit(EngineEventKind::kStallTick);
  s.observer = std::move(observer);
  s.failed = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(mu_);
  auto list = std::make_shared<List>(list_ ? *list_ : List{});
  list->push_back(std::move(s));
  install(std::move(list));
}

bool ObserverHub::remove(const std::shared_ptr<EngineObserver>& observer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!list_) return false;
  auto list = std::make_shared<List>(*list_);
  auto it = std::find_if(list->begin(), list->end(), [&](const Subscriber& s) { return s.observer == observer; });
  if (it == list->end()) return false;
  list->erase(it);
  install(std::move(list));
  return true;
}

void ObserverHub::install(std::shared_ptr<const List> list) {
  EventMask mask = 0;
  int64_t tick = 0;
  for (const auto& s : *list) {
    mask |= s.mask;
    if (s.mask & eventBit(EngineEventKind::kStallTick)) tick = tick == 0 ? s.tickMs : std::min(tick, s.tickMs);
  }
  list_ = std::move(list);
  tickMs_.store(tick, std::memory_order_relaxed);
  mask_.store(mask, std::memory_order_relaxed);
}

void ObserverHub::publish(EngineEvent& event) const {
  std::shared_ptr<const List> list;
  {
    std::lock_guard<std::mutex> lock(mu_);
    list = list_;
  }
  if (!list) return;
  if (event.timeNs == 0) event.timeNs = nowNs();
  const EventMask bit = eventBit(event.kind);
  for (const auto& s : *list) {
    if ((s.mask & bit) == 0) continue;
    try {
      s.observer->onEvent(event);
    } catch (const std::exception& e) {
      if (!s.failed->exchange(true)) {
        HVD_LOG(Error) << "Engine observer failed on " << eventKindName(event.kind) << ": " << e.what()
                       << " (its further failures are not logged)";
      }
    } catch (...) {
      if (!s.failed->exchange(true)) {
        HVD_LOG(Error) << "Engine observer failed on " << eventKindName(event.kind)
                       << " (its further failures are not logged)";
      }
    }
  }
}

}  // namespace hvd::engine
