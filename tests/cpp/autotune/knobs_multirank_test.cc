// Knob changes on several ranks (threads, each its own Runtime over the local transport): every
// rank applies the same knobs at the same response list, runs the same fused collectives, and
// the results stay right; the real Autotuner settles and leaves every rank with its choice.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "../engine/cluster.h"
#include "autotune/autotuner.h"
#include "collectives/algorithms.h"
#include "engine/tuner.h"

namespace hvd::test {
namespace {

using engine::EngineEvent;
using engine::EngineEventKind;
using engine::Knobs;

// Per rank: the list index (count of cycle starts) at which each knob change applied, and the
// tensors of every collective in order.
class KnobRecorder : public engine::EngineObserver {
 public:
  engine::EventMask interests() const override {
    return engine::eventBit(EngineEventKind::kCycleStart) | engine::eventBit(EngineEventKind::kKnobsApplied) |
           engine::eventBit(EngineEventKind::kCollectiveEnd);
  }
  void onEvent(const EngineEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.kind == EngineEventKind::kCycleStart) {
      ++lists_;
    } else if (e.kind == EngineEventKind::kKnobsApplied) {
      applied.emplace_back(lists_, *e.knobs);
    } else {
      std::string names;
      for (size_t i = 0; i < e.tensors.size(); ++i) names += std::string(e.tensors[i]) + " ";
      collectives.push_back(std::to_string(lists_) + ": " + names);
    }
  }
  std::mutex mu_;
  uint64_t lists_ = 0;
  std::vector<std::pair<uint64_t, Knobs>> applied;
  std::vector<std::string> collectives;
};

// Rank 0's scripted tuner: a new setting every `every` polls, from a fixed list.
class ScriptedTuner : public engine::Tuner {
 public:
  ScriptedTuner(std::vector<Knobs> script, int every) : script_(std::move(script)), every_(every) {}
  engine::EventMask interests() const override { return 0; }
  void onEvent(const EngineEvent&) override {}
  std::optional<Knobs> poll() override {
    if (++polls_ % every_ != 0 || next_ >= script_.size()) return std::nullopt;
    return script_[next_++];
  }
  bool done() const override { return next_ >= script_.size(); }

 private:
  std::vector<Knobs> script_;
  int every_;
  size_t next_ = 0;
  int polls_ = 0;
};

// `steps` training steps of 24 float tensors (sizes 1..24 K elements) on every rank; checks
// each sum.
void train(Cluster& c, int steps) {
  c.run([&](int r, engine::Runtime& rt) {
    const int n = c.size();
    for (int s = 0; s < steps; ++s) {
      std::vector<std::vector<float>> data(24);
      std::vector<WorkPtr> works;
      for (int t = 0; t < 24; ++t) {
        data[t].assign(static_cast<size_t>(t + 1) * 1024, static_cast<float>(r + 1 + s));
        works.push_back(rt.allreduce(view(data[t], DataType::kFloat32), view(data[t], DataType::kFloat32),
                                     named("grad." + std::to_string(t))));
      }
      for (auto& w : works) w->wait();
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>(q + 1 + s);
      for (int t = 0; t < 24; ++t) {
        ASSERT_EQ(data[t].front(), want) << "rank " << r << " step " << s << " tensor " << t;
        ASSERT_EQ(data[t].back(), want);
      }
    }
  });
}

TEST(KnobsAcrossRanks, EveryRankAppliesTheSameKnobsAtTheSameListAndFusesAlike) {
  Cluster c(3, {{"HOROVOD_BURST_QUIET_US", "20"}});
  std::vector<std::shared_ptr<KnobRecorder>> rec;
  for (int r = 0; r < 3; ++r) {
    rec.push_back(std::make_shared<KnobRecorder>());
    c[r].addObserver(rec.back());
  }
  Knobs base = c[0].knobs();
  std::vector<Knobs> script;
  for (int64_t threshold : {4096, 64 << 10, 0, 1 << 20, 128 << 20}) {
    Knobs k = base;
    k.fusionThreshold = threshold;
    k.allreduceCrossoverBytes = threshold == 0 ? 1024 : 1 << 20;
    k.cacheEnabled = threshold != 0;  // turning the cache off and on again
    k.burstQuietUs = threshold == 0 ? 0 : 50;
    script.push_back(k);
  }
  auto tuner = std::make_shared<ScriptedTuner>(script, 3);
  EXPECT_THROW(c[1].setTuner(tuner), InvalidArgument);
  c[0].setTuner(tuner);
  train(c, 30);
  EXPECT_TRUE(tuner->done());
  for (int r = 0; r < 3; ++r) c[r].removeObserver(rec[r]);

  ASSERT_EQ(rec[0]->applied.size(), script.size());
  for (size_t i = 0; i < script.size(); ++i) EXPECT_EQ(rec[0]->applied[i].second, script[i]) << i;
  for (int r = 1; r < 3; ++r) {
    ASSERT_EQ(rec[r]->applied.size(), rec[0]->applied.size()) << "rank " << r;
    for (size_t i = 0; i < rec[0]->applied.size(); ++i) {
      EXPECT_EQ(rec[r]->applied[i].first, rec[0]->applied[i].first) << "rank " << r << " change " << i;
      EXPECT_EQ(rec[r]->applied[i].second, rec[0]->applied[i].second) << "rank " << r << " change " << i;
    }
    // Same lists, same collectives over the same tensors in the same order.
    EXPECT_EQ(rec[r]->collectives, rec[0]->collectives) << "rank " << r;
    EXPECT_EQ(c[r].knobs(), script.back());
  }
  // The fusion threshold really changed what ran: with fusion off, 24 collectives a step.
  EXPECT_GT(rec[0]->collectives.size(), 30u * 2u);
}

TEST(KnobsAcrossRanks, TheAutotunerSettlesAndEveryRankKeepsItsChoice) {
  Cluster c(2);
  autotune::AutotuneOptions o;
  o.enabled = true;
  o.warmupSamples = 1;
  o.stepsPerSample = 2;
  o.maxSamples = 6;
  autotune::KnobSpaceInputs in;
  in.initial = c[0].knobs();
  auto tuner = std::make_shared<autotune::Autotuner>(o, autotune::KnobSpace(in));
  c[0].setTuner(tuner);
  train(c, 60);
  ASSERT_TRUE(tuner->done());
  auto history = tuner->history();
  ASSERT_EQ(history.size(), 1u + 6u + 1u);
  EXPECT_EQ(history.back().phase, "final");
  EXPECT_EQ(c[0].knobs(), history.back().knobs);
  Knobs onRank1 = c[1].knobs();
  // The caller waits are this rank's own, but they came from rank 0's list like the rest.
  EXPECT_EQ(onRank1, history.back().knobs);
}

TEST(KnobsAcrossRanks, TheCrossoverFromTheEnvironmentIsInForceAndPinned) {
  Cluster c(2, {{"HOROVOD_ALLREDUCE_CROSSOVER_BYTES", "4096"}});
  EXPECT_EQ(c[0].knobs().allreduceCrossoverBytes, 4096);
  EXPECT_EQ(c[1].knobs().allreduceCrossoverBytes, 4096);
  EXPECT_TRUE(c[0].config().pinned.allreduceCrossover);
  // What the value means to the table: 8 KiB to one peer is past a 4 KiB crossover.
  EXPECT_STREQ(collectives::chooseAllreduce("", 8192, 2, true, false, false, 4096).name, "shm_slices");
  EXPECT_STREQ(collectives::chooseAllreduce("", 8192, 2, true, false, false, 0).name, "shm_direct");
  EXPECT_STREQ(collectives::chooseAllreduce("", 8192, 2, false, false, false, 4096).name, "ring");
  EXPECT_STREQ(collectives::chooseAllreduce("", 8192, 2, false, false, false, 0).name, "recursive_doubling");
  train(c, 3);
}

}  // namespace
}  // namespace hvd::test
