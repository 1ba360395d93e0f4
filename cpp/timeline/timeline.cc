#include "timeline/timeline.h"

#include <cstdio>

#include "horovod/errors.h"

namespace hvd::timeline {
namespace {

using engine::EngineEvent;
using engine::EngineEventKind;
using engine::eventBit;

const Param<std::string> kTimeline(
    "HOROVOD_TIMELINE", "",
    "Chrome-trace timeline written by rank 0 to this path from init(); DYNAMIC: none at init, but "
    "start_timeline() is allowed (it is with any value set).");
const Param<bool> kTimelineMarkCycles("HOROVOD_TIMELINE_MARK_CYCLES", false,
                                      "Mark each engine step that does work with a CYCLE_START instant event.");
const Param<int64_t> kTimelineMaxBytes(
    "HOROVOD_TIMELINE_MAX_BYTES", 50'000'000,
    "Disk bound of the timeline: the start of the job in <file>.head (a quarter of this), then the file and <file>.1 "
    "rotating (3/8 each); 0 = unbounded.");

constexpr int64_t kMinMaxBytes = 64 * 1024;

}  // namespace

std::string knobsArgs(const engine::Knobs& k, double score, const char* decision) {
  std::string args = "{\"fusion_threshold\":" + std::to_string(k.fusionThreshold) +
                     ",\"burst_quiet_us\":" + std::to_string(k.burstQuietUs) +
                     ",\"caller_progress_us\":" + std::to_string(k.callerProgressUs) +
                     ",\"caller_spin_us\":" + std::to_string(k.callerSpinUs) +
                     ",\"allreduce_crossover_bytes\":" + std::to_string(k.allreduceCrossoverBytes) +
                     ",\"cache\":" + (k.cacheEnabled ? "true" : "false") +
                     ",\"hierarchical\":" + (k.hierarchical ? "true" : "false");
  if (decision != nullptr) args += ",\"decision\":\"" + jsonEscape(decision) + "\"";
  if (score >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), ",\"score_bytes_per_s\":%.1f", score);
    args += buf;
  }
  return args + "}";
}

TimelineSettings TimelineSettings::fromEnvironment(const EnvLookup& env) {
  TimelineSettings s;
  const std::string value = kTimeline.get(env);
  s.enabled = !value.empty();
  s.path = value == "DYNAMIC" ? "" : value;
  s.markCycles = kTimelineMarkCycles.get(env);
  s.maxBytes = kTimelineMaxBytes.get(env);
  if (s.maxBytes != 0 && s.maxBytes < kMinMaxBytes) {
    throw InvalidArgument(std::string(kTimelineMaxBytes.name()) + "='" + std::to_string(s.maxBytes) +
                          "' must be 0 (unbounded) or at least " + std::to_string(kMinMaxBytes));
  }
  return s;
}

Timeline::Timeline(const std::string& path, bool markCycles, WriterOptions options)
    : markCycles_(markCycles), writer_(path, options) {
  scratch_.reserve(256);
}

Timeline::~Timeline() { writer_.close(); }

engine::EventMask Timeline::interests() const {
  engine::EventMask mask = eventBit(EngineEventKind::kCacheHit) | eventBit(EngineEventKind::kNegotiateStart) |
                           eventBit(EngineEventKind::kNegotiateRank) | eventBit(EngineEventKind::kNegotiateEnd) |
                           eventBit(EngineEventKind::kFusionCopyInStart) | eventBit(EngineEventKind::kFusionCopyInEnd) |
                           eventBit(EngineEventKind::kCollectiveStart) | eventBit(EngineEventKind::kCollectiveEnd) |
                           eventBit(EngineEventKind::kFusionCopyOutStart) |
                           eventBit(EngineEventKind::kFusionCopyOutEnd);
  if (markCycles_) mask |= eventBit(EngineEventKind::kCycleStart);
  mask |= eventBit(EngineEventKind::kKnobsApplied);  // rare: autotune's changes
  return mask;
}

Timeline::Row& Timeline::row(std::string_view name) {
  auto it = rows_.find(name);
  if (it != rows_.end()) return it->second;
  Row& r = rows_.emplace(std::string(name), Row{}).first->second;
  r.id = static_cast<uint32_t>(rows_.size());
  writer_.addRow(r.id, name);
  return r;
}

const std::vector<Timeline::Row*>& Timeline::responseRows(const engine::TensorNames& tensors) {
  // A response's execution events name the same tensors in the same order: look the rows up once.
  const size_t n = tensors.size();
  if (n == current_.size() && n > 0 && tensors[0] == currentFirst_ && tensors[n - 1] == currentLast_) {
    return current_;
  }
  current_.clear();
  for (size_t i = 0; i < n; ++i) current_.push_back(&row(tensors[i]));
  currentFirst_ = n > 0 ? std::string(tensors[0]) : std::string();
  currentLast_ = n > 0 ? std::string(tensors[n - 1]) : std::string();
  return current_;
}

void Timeline::closeQueues(const EngineEvent& e) {
  scratch_.clear();
  for (Row* r : responseRows(e.tensors)) {
    if (r->queueStartNs < 0) continue;
    Record rec;
    rec.activity = Activity::kQueue;
    rec.op = e.op;
    rec.row = r->id;
    rec.processSet = e.processSet;
    rec.startNs = r->queueStartNs;
    rec.endNs = e.timeNs;
    scratch_.push_back(rec);
    r->queueStartNs = -1;
  }
  if (!scratch_.empty()) writer_.push(scratch_);
}

void Timeline::spans(const EngineEvent& e, Activity activity, int64_t startNs) {
  const auto& rows = responseRows(e.tensors);
  scratch_.clear();
  for (Row* r : rows) {
    Record rec;
    rec.activity = activity;
    rec.op = e.op;
    rec.row = r->id;
    rec.processSet = e.processSet;
    rec.fused = static_cast<uint32_t>(rows.size());
    rec.startNs = startNs >= 0 && startNs <= e.timeNs ? startNs : e.timeNs;
    rec.endNs = e.timeNs;
    rec.bytes = e.bytes;
    rec.algorithm = e.algorithm;
    scratch_.push_back(rec);
  }
  if (!scratch_.empty()) writer_.push(scratch_);
}

void Timeline::onEvent(const EngineEvent& e) {
  switch (e.kind) {
    case EngineEventKind::kNegotiateStart:
      if (!e.tensors.empty()) row(e.tensors[0]).negotiateStartNs = e.timeNs;
      break;
    case EngineEventKind::kNegotiateRank:
      if (!e.tensors.empty()) {
        Record rec;
        rec.activity = Activity::kRankReady;
        rec.op = e.op;
        rec.row = row(e.tensors[0]).id;
        rec.rank = e.rank;
        rec.startNs = e.timeNs;
        writer_.push({&rec, 1});
      }
      break;
    case EngineEventKind::kNegotiateEnd:
      if (!e.tensors.empty()) {
        Row& r = row(e.tensors[0]);
        Record rec;
        rec.activity = Activity::kNegotiate;
        rec.op = e.op;
        rec.row = r.id;
        rec.processSet = e.processSet;
        rec.startNs = r.negotiateStartNs >= 0 ? r.negotiateStartNs : e.timeNs;
        rec.endNs = e.timeNs;
        writer_.push({&rec, 1});
        r.negotiateStartNs = -1;
        r.queueStartNs = e.timeNs;
      }
      break;
    case EngineEventKind::kCacheHit:
      if (!e.tensors.empty()) row(e.tensors[0]).queueStartNs = e.timeNs;
      break;
    case EngineEventKind::kFusionCopyInStart:
      closeQueues(e);
      copyInStartNs_ = e.timeNs;
      break;
    case EngineEventKind::kFusionCopyInEnd:
      spans(e, Activity::kCopyIn, copyInStartNs_);
      copyInStartNs_ = -1;
      break;
    case EngineEventKind::kCollectiveStart:
      closeQueues(e);
      collectiveStartNs_ = e.timeNs;
      break;
    case EngineEventKind::kCollectiveEnd:
      if (collectiveStartNs_ < 0) closeQueues(e);  // no start reported: the queue ends here
      spans(e, Activity::kCollective, collectiveStartNs_);
      collectiveStartNs_ = -1;
      break;
    case EngineEventKind::kFusionCopyOutStart: copyOutStartNs_ = e.timeNs; break;
    case EngineEventKind::kFusionCopyOutEnd:
      spans(e, Activity::kCopyOut, copyOutStartNs_);
      copyOutStartNs_ = -1;
      break;
    case EngineEventKind::kKnobsApplied:
      if (e.knobs != nullptr) writer_.pushInstant("AUTOTUNE", e.timeNs, knobsArgs(*e.knobs, e.score, e.decision));
      break;
    case EngineEventKind::kCycleStart: {
      Record rec;
      rec.activity = Activity::kCycleStart;
      rec.startNs = e.timeNs;
      writer_.push({&rec, 1});
      break;
    }
    default: break;
  }
}

}  // namespace hvd::timeline
