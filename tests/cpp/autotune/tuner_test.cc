// The autotuner's bookkeeping without an engine: the SampleMeter on made-up event streams, the
// knob space (pins, rounding, the grid), and the Autotuner's phases and log fed with events.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "autotune/autotune_log.h"
#include "autotune/autotuner.h"
#include "autotune/knob_space.h"
#include "autotune/sample_meter.h"
#include "horovod/errors.h"

namespace hvd::autotune {
namespace {

constexpr int64_t kMs = 1000000;

// One training step: two lists, the first with tensors a and b (100 bytes each), the second c
// (50 bytes); `ms` per step, starting at t.
void step(SampleMeter& m, int64_t t, int64_t ms, std::vector<double>& scores) {
  m.listStart(t);
  for (const char* name : {"a", "b"}) {
    if (auto s = m.collective({name}, 100)) scores.push_back(*s);
  }
  m.listStart(t + ms * kMs / 2);
  if (auto s = m.collective({"c"}, 50)) scores.push_back(*s);
}

TEST(SampleMeter, CountsWholeStepsByTheFirstRecurringName) {
  SampleMeter m(3);
  std::vector<double> scores;
  // A one-off name first (an initial broadcast): it never becomes the anchor.
  m.listStart(0);
  m.collective({"broadcast.w"}, 1000);
  for (int i = 0; i < 8; ++i) step(m, (1 + i * 10) * kMs, 10, scores);
  // "a" recurs first, at step 1; boundaries at steps 1, 4, 7: two samples of 3 steps (750 bytes
  // in 30 ms each).
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_DOUBLE_EQ(scores[1], scores[0]);
  EXPECT_EQ(m.anchor(), "a");
  EXPECT_DOUBLE_EQ(m.lastSeconds(), 0.03);
  EXPECT_EQ(m.lastBytes(), 750);
  EXPECT_DOUBLE_EQ(scores[0], 750 / 0.03);
  EXPECT_EQ(m.stepsInWindow(), 0);  // the next window opened at step 6
}

TEST(SampleMeter, ResetDiscardsTheOpenWindowAndReopensAtTheNextBoundary) {
  SampleMeter m(2);
  std::vector<double> scores;
  step(m, 0, 10, scores);
  step(m, 10 * kMs, 10, scores);  // the window opens here (the anchor recurred)
  m.reset();  // the knobs changed before step 2
  step(m, 20 * kMs, 40, scores);  // slower steps from now on
  step(m, 60 * kMs, 40, scores);
  EXPECT_TRUE(scores.empty());
  step(m, 100 * kMs, 40, scores);
  ASSERT_EQ(scores.size(), 1u);
  EXPECT_DOUBLE_EQ(m.lastSeconds(), 0.08);  // steps 2 and 3 only
  EXPECT_DOUBLE_EQ(scores[0], 500 / 0.08);
}

TEST(SampleMeter, FusedResponsesAndOtherNamesDoNotCountAsSteps) {
  SampleMeter m(1);
  m.listStart(0);
  m.collective({"x", "y"}, 10);
  m.listStart(1 * kMs);
  EXPECT_FALSE(m.collective({"z", "y"}, 10).has_value());  // y recurs first: the anchor, a window opens
  EXPECT_EQ(m.anchor(), "y");
  m.listStart(2 * kMs);
  EXPECT_FALSE(m.collective({"x", "w"}, 10).has_value());  // no y: not a boundary
  m.listStart(4 * kMs);
  auto s = m.collective({"w", "y"}, 10);  // y again, inside a fused response
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(*s, 20 / 0.003);  // the lists at 1 and 2 ms
}

KnobSpaceInputs inputs() {
  KnobSpaceInputs in;
  in.initial.fusionThreshold = 128 << 20;
  in.initial.burstQuietUs = 2;
  in.initial.callerProgressUs = 200;
  in.initial.callerSpinUs = 1000;
  in.initial.allreduceCrossoverBytes = 65536;
  in.fusionUnit = 1024;
  return in;
}

TEST(KnobSpace, PinnedAndImpossibleKnobsStayOut) {
  KnobSpaceInputs in = inputs();
  EXPECT_EQ(KnobSpace(in).dims(), 6u);  // hierarchical needs several hosts
  in.hosts = 2;
  EXPECT_EQ(KnobSpace(in).dims(), 7u);
  in.pinFusion = true;
  in.pinCache = true;
  in.pinAlgorithm = true;  // pins the crossover and hierarchical
  KnobSpace s(in);
  ASSERT_EQ(s.dims(), 3u);
  EXPECT_EQ(s.free()[0], KnobId::kBurstQuietUs);
  // Pinned knobs keep their values whatever the coordinates.
  engine::Knobs k = s.toKnobs({1.0, 1.0, 1.0});
  EXPECT_EQ(k.fusionThreshold, 128 << 20);
  EXPECT_EQ(k.burstQuietUs, 200);
  EXPECT_EQ(k.callerProgressUs, 2000);
  EXPECT_EQ(k.callerSpinUs, 5000);
  // Callers that may not drive (progress 0) keep 0 and their spin too.
  in = inputs();
  in.initial.callerProgressUs = 0;
  KnobSpace noCallers(in);
  for (KnobId id : noCallers.free()) {
    EXPECT_NE(id, KnobId::kCallerProgressUs);
    EXPECT_NE(id, KnobId::kCallerSpinUs);
  }
}

TEST(KnobSpace, CoordinatesRoundTripAndSnap) {
  KnobSpace s(inputs());
  engine::Knobs k = s.toKnobs({0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  EXPECT_EQ(k.fusionThreshold, 16384);
  EXPECT_EQ(k.burstQuietUs, 0);
  EXPECT_EQ(k.callerProgressUs, 1);
  EXPECT_EQ(k.callerSpinUs, 0);
  EXPECT_EQ(k.allreduceCrossoverBytes, 1024);
  EXPECT_FALSE(k.cacheEnabled);
  std::vector<double> c = {0.37, 0.51, 0.2, 0.9, 0.66, 0.7};
  s.snap(c);
  EXPECT_EQ(c[5], 1.0);
  const engine::Knobs a = s.toKnobs(c);
  EXPECT_EQ(s.toKnobs(s.toCoords(a)), a);
  EXPECT_EQ(a.fusionThreshold % 1024, 0);
  // The initial knobs map to themselves.
  EXPECT_EQ(s.toKnobs(s.toCoords(s.initial())), s.initial());
}

TEST(KnobSpace, GridCoversEveryCombination) {
  KnobSpaceInputs in = inputs();
  KnobSpace s(in, {KnobId::kFusionThreshold, KnobId::kBurstQuietUs, KnobId::kCacheEnabled});
  auto grid = s.grid(3);
  ASSERT_EQ(grid.size(), 3u * 3u * 2u);
  EXPECT_EQ(grid.front().fusionThreshold, 16384);
  EXPECT_EQ(grid.back().fusionThreshold, 256 << 20);
  EXPECT_TRUE(grid.back().cacheEnabled);
  EXPECT_FALSE(grid.front().cacheEnabled);
  // Bounded: 16 values for six knobs would be 16^5 * 2 settings.
  EXPECT_THROW(KnobSpace(in).grid(16), InvalidArgument);
}

// Feeds an Autotuner steps whose speed depends on the knobs it hands out: bytes per second peak
// at a fusion threshold of 1 MiB. Returns the knobs in force at the end.
engine::Knobs drive(Autotuner& tuner, int steps, int64_t& t) {
  std::vector<engine::TensorInfo> a(1), b(1);
  a[0].name = "grad.a";
  b[0].name = "grad.b";
  engine::Knobs in = tuner.space().initial();
  for (int i = 0; i < steps && !tuner.done(); ++i) {
    if (auto k = tuner.poll()) in = *k;
    const double l = std::log2(static_cast<double>(in.fusionThreshold));
    const int64_t ns = static_cast<int64_t>(kMs * (1.0 + 0.05 * (l - 20) * (l - 20)));
    engine::EngineEvent e;
    e.kind = engine::EngineEventKind::kCycleStart;
    e.timeNs = t;
    tuner.onEvent(e);
    e.kind = engine::EngineEventKind::kCollectiveEnd;
    e.bytes = 1000;
    e.tensors = engine::TensorNames::of(a);
    tuner.onEvent(e);
    e.tensors = engine::TensorNames::of(b);
    tuner.onEvent(e);
    t += ns;
  }
  if (auto k = tuner.poll()) in = *k;
  return in;
}

std::string tempPath(const char* tag) {
  return "/tmp/hvd_autotune_" + std::string(tag) + "_" + std::to_string(getpid()) + ".csv";
}

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Autotuner, WarmsUpSamplesSettlesAndLogs) {
  AutotuneOptions o;
  o.enabled = true;
  o.warmupSamples = 2;
  o.stepsPerSample = 3;
  o.maxSamples = 12;
  o.noise = 0.05;
  const std::string path = tempPath("phases");
  KnobSpaceInputs in = inputs();
  Autotuner tuner(o, KnobSpace(in, {KnobId::kFusionThreshold}), std::make_unique<AutotuneLog>(path));
  int64_t t = 0;
  const engine::Knobs final = drive(tuner, 1000, t);
  ASSERT_TRUE(tuner.done());

  auto history = tuner.history();
  ASSERT_EQ(history.size(), 2u + 12u + 1u);
  EXPECT_EQ(history[0].phase, "warmup");
  EXPECT_EQ(history[1].phase, "warmup");
  EXPECT_EQ(history[2].phase, "sample");
  EXPECT_EQ(history[2].index, 0);
  EXPECT_EQ(history[2].knobs, in.initial);  // the first scored sample is the starting point
  EXPECT_EQ(history.back().phase, "final");
  EXPECT_EQ(history.back().knobs, final);
  // 1 MiB is best; the model should land within a factor of 2 of it.
  EXPECT_GE(final.fusionThreshold, 512 << 10);
  EXPECT_LE(final.fusionThreshold, 2 << 20);

  auto rows = lines(path);
  ASSERT_EQ(rows.size(), 1u + history.size());
  EXPECT_EQ(rows[0], AutotuneLog::header());
  EXPECT_EQ(rows[0].rfind("sample,phase,fusion_threshold_bytes,", 0), 0u);
  EXPECT_EQ(rows[1].rfind("0,warmup,134217728,", 0), 0u) << rows[1];
  EXPECT_EQ(rows.back().find(",final," + std::to_string(final.fusionThreshold) + ","), rows.back().find(','))
      << rows.back();
  std::remove(path.c_str());
}

TEST(Autotuner, GridVisitsEveryPointThenTheBest) {
  AutotuneOptions o;
  o.enabled = true;
  o.warmupSamples = 0;
  o.stepsPerSample = 2;
  o.strategy = "grid";
  o.gridPoints = 4;
  Autotuner tuner(o, KnobSpace(inputs(), {KnobId::kFusionThreshold}));
  int64_t t = 0;
  const engine::Knobs final = drive(tuner, 1000, t);
  ASSERT_TRUE(tuner.done());
  auto history = tuner.history();
  ASSERT_EQ(history.size(), 1u + 4u + 1u);  // the start, the grid, the choice
  // Grid thresholds: 2^14, 2^(14+14/3), ..., 2^28; 2^18.67 is the closest to 1 MiB.
  EXPECT_EQ(final.fusionThreshold, history[2].knobs.fusionThreshold);
}

TEST(Autotuner, StopsListeningOnceSettled) {
  AutotuneOptions o;
  o.enabled = true;
  o.warmupSamples = 0;
  o.stepsPerSample = 1;
  o.maxSamples = 1;
  Autotuner tuner(o, KnobSpace(inputs(), {KnobId::kFusionThreshold}));
  int64_t t = 0;
  drive(tuner, 100, t);
  EXPECT_TRUE(tuner.done());
  EXPECT_EQ(tuner.history().size(), 2u);
  EXPECT_FALSE(tuner.poll().has_value());
}

TEST(AutotuneOptions, ValidatesEveryVariable) {
  auto env = [](std::string name, std::string value) { return mapEnvironment({{std::move(name), std::move(value)}}); };
  EXPECT_FALSE(AutotuneOptions::fromEnvironment(mapEnvironment({})).enabled);
  EXPECT_TRUE(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE", "1")).enabled);
  EXPECT_THROW(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE", "sure")), InvalidArgument);
  EXPECT_THROW(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "1.5")),
               InvalidArgument);
  EXPECT_THROW(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "0")), InvalidArgument);
  EXPECT_THROW(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "x")), InvalidArgument);
  EXPECT_THROW(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE_STRATEGY", "random")), InvalidArgument);
  EXPECT_EQ(AutotuneOptions::fromEnvironment(env("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "7")).maxSamples, 7);
  EXPECT_THROW(AutotuneLog("/nonexistent-dir/x.csv"), InvalidArgument);
}

}  // namespace
}  // namespace hvd::autotune
