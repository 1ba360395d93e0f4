// startTimeline / stopTimeline of horovod.h, and the timeline the default Runtime starts at init
// from HOROVOD_TIMELINE. The Timeline is an observer of the default Runtime on rank 0; this file
// owns it between init and shutdown.
#include <memory>
#include <mutex>

#include "api/default_runtime.h"
#include "common/logging.h"
#include "horovod/horovod.h"
#include "timeline/timeline.h"

namespace hvd {
namespace api {
namespace {

struct TimelineState {
  std::mutex mu;
  timeline::TimelineSettings settings;        // as read at the last init
  std::weak_ptr<engine::Runtime> runtime;     // the one the timeline observes
  std::shared_ptr<timeline::Timeline> active;
};

TimelineState& state() {
  static TimelineState s;
  return s;
}

// Under mu. Detaches and completes the running timeline, if any.
void stopLocked(TimelineState& s) {
  if (!s.active) return;
  if (auto runtime = s.runtime.lock()) runtime->removeObserver(s.active);
  s.active->close();
  if (s.active->dropped() > 0) {
    HVD_LOG(Warning) << "Timeline " << s.active->path() << ": " << s.active->dropped()
                     << " events dropped (the writer fell behind)";
  }
  s.active.reset();
}

// Under mu.
void startLocked(TimelineState& s, const std::shared_ptr<engine::Runtime>& runtime, const std::string& path,
                 bool markCycles) {
  stopLocked(s);
  timeline::WriterOptions options;
  options.maxBytes = s.settings.maxBytes;
  auto t = std::make_shared<timeline::Timeline>(path, markCycles, options);
  runtime->addObserver(t);
  s.runtime = runtime;
  s.active = std::move(t);
}

}  // namespace

timeline::TimelineSettings readTimelineSettings(const EnvLookup& env) {
  return timeline::TimelineSettings::fromEnvironment(env);
}

void startTimelineAtInit(const std::shared_ptr<engine::Runtime>& runtime, const timeline::TimelineSettings& settings) {
  TimelineState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  stopLocked(s);
  s.settings = settings;
  s.runtime = runtime;
  // Called before runtime->init(): the rank is the configured one (init does not change it).
  if (!settings.enabled || settings.path.empty() || runtime->config().rank != 0) return;
  try {
    startLocked(s, runtime, settings.path, settings.markCycles);
  } catch (const std::exception& e) {
    // The other ranks are initialized already: failing here would leave them waiting.
    HVD_LOG(Error) << "Timeline not started: " << e.what();
  }
}

void stopTimelineAtShutdown() {
  TimelineState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  stopLocked(s);
  s.runtime.reset();
}

}  // namespace api

void startTimeline(const std::string& path, bool markCycles) {
  auto runtime = api::runtimeForQueries();
  api::TimelineState& s = api::state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.settings.enabled) throw InvalidArgument("Set HOROVOD_TIMELINE=DYNAMIC to enable dynamic timeline usage.");
  if (path.empty()) throw InvalidArgument("start_timeline: the file path is empty");
  if (runtime->topology().rank != 0) return;
  api::startLocked(s, runtime, path, markCycles);
}

void stopTimeline() {
  (void)api::runtimeForQueries();
  api::TimelineState& s = api::state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active) {
    HVD_LOG(Debug) << "stop_timeline: no timeline is running";
    return;
  }
  api::stopLocked(s);
}

}  // namespace hvd
