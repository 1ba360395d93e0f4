// The timeline as an observer of real runtimes (ranks as threads): the rows and activities it
// writes, a file that parses at any moment while it is being written, and the disk bound.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "engine/cluster.h"
#include "timeline/timeline.h"

namespace hvd::test {
namespace {

using timeline::Timeline;
using timeline::WriterOptions;

// A strict JSON value checker (RFC 8259 grammar, no extensions): enough to tell that a reader
// such as json.loads accepts the text.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& text) : s_(text) {}
  bool valid() {
    ws();
    if (!value()) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  bool value() {
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    for (const char* lit : {"true", "false", "null"}) {
      if (s_.compare(i_, std::strlen(lit), lit) == 0) {
        i_ += std::strlen(lit);
        return true;
      }
    }
    return false;
  }
  bool object() {
    ++i_;
    ws();
    if (peek('}')) return ++i_, true;
    while (true) {
      ws();
      if (!peek('"') || !string()) return false;
      ws();
      if (!peek(':')) return false;
      ++i_;
      ws();
      if (!value()) return false;
      ws();
      if (peek(',')) {
        ++i_;
        continue;
      }
      if (peek('}')) return ++i_, true;
      return false;
    }
  }
  bool array() {
    ++i_;
    ws();
    if (peek(']')) return ++i_, true;
    while (true) {
      ws();
      if (!value()) return false;
      ws();
      if (peek(',')) {
        ++i_;
        continue;
      }
      if (peek(']')) return ++i_, true;
      return false;
    }
  }
  bool string() {
    ++i_;
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        char e = s_[i_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k) {
            if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_++]))) return false;
          }
        } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
          return false;
        }
      }
    }
    return false;
  }
  bool number() {
    size_t start = i_;
    if (peek('-')) ++i_;
    if (!digits()) return false;
    if (peek('.')) {
      ++i_;
      if (!digits()) return false;
    }
    if (peek('e') || peek('E')) {
      ++i_;
      if (peek('+') || peek('-')) ++i_;
      if (!digits()) return false;
    }
    return i_ > start;
  }
  bool digits() {
    size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    return i_ > start;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  const std::string& s_;
  size_t i_ = 0;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What a tolerant reader does with a file being written: keep the complete lines, drop the
// trailing comma, close the array.
std::string asClosedArray(std::string text) {
  const size_t lastNewline = text.rfind('\n');
  text = lastNewline == std::string::npos ? std::string() : text.substr(0, lastNewline + 1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (!text.empty() && text.back() == ']') return text;
  if (!text.empty() && text.back() == ',') text.pop_back();
  return text + "\n]";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The "ts" of the first event that has one (microseconds), or -1.
double firstTimestamp(const std::string& text) {
  const size_t at = text.find("\"ts\":");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + 5, 32));
}

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("hvd_timeline_" + std::to_string(::getpid()) + "_" + name + ".json"))
      .string();
}

std::shared_ptr<Timeline> attach(Cluster& cluster, const std::string& path, bool markCycles,
                                 WriterOptions options = {}) {
  auto t = std::make_shared<Timeline>(path, markCycles, options);
  cluster[0].addObserver(t);
  return t;
}

void detach(Cluster& cluster, const std::shared_ptr<Timeline>& t) {
  cluster[0].removeObserver(t);
  t->close();
}

TEST(Timeline, RowsAndActivities) {
  const std::string path = tempPath("rows");
  // A cache of 0 negotiates every step in full; the default cache answers repeats from the cache.
  for (const char* cache : {"0", "1024"}) {
    SCOPED_TRACE(std::string("cache capacity ") + cache);
    Cluster cluster(2, {{"HOROVOD_CACHE_CAPACITY", cache}});
    auto t = attach(cluster, path, /*markCycles=*/true);
    cluster.run([&](int rank, engine::Runtime& rt) {
      for (int step = 0; step < 3; ++step) {
        std::vector<float> in(16, 1.0f + rank), out(16);
        rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("allreduce.test_allreduce"))
            ->wait();
        ASSERT_EQ(out[0], 3.0f);
        std::vector<std::vector<float>> fin(3, std::vector<float>(8, 1.0f)), fout(3, std::vector<float>(8));
        std::vector<TensorView> ins, outs;
        for (int i = 0; i < 3; ++i) {
          ins.push_back(view(fin[i], DataType::kFloat32));
          outs.push_back(view(fout[i], DataType::kFloat32));
        }
        rt.groupedAllreduce(ins, outs, named("grouped"))->wait();
        std::vector<int32_t> g(4, rank);
        rt.allgather(view(g, DataType::kInt32), named("allgather.g"))->wait();
      }
    });
    detach(cluster, t);
    const std::string text = readFile(path);
    ASSERT_TRUE(JsonChecker(text).valid()) << text.substr(0, 2000);
    EXPECT_EQ(text.back(), '\n');
    EXPECT_NE(text.find("\"start_time_since_epoch_in_micros\""), std::string::npos);
    // One row per tensor, named by its full name.
    EXPECT_EQ(count(text, "\"args\":{\"name\":\"allreduce.test_allreduce\"}"), 1u);
    EXPECT_EQ(count(text, "\"args\":{\"name\":\"allgather.g\"}"), 1u);
    EXPECT_EQ(count(text, "\"args\":{\"name\":\"grouped_2of3\"}"), 1u) << text;
    // Execution on every step, cached or not.
    EXPECT_GE(count(text, "\"name\":\"ALLREDUCE\",\"ph\":\"X\""), 3u * 4u);
    EXPECT_GE(count(text, "\"name\":\"ALLGATHER\",\"ph\":\"X\""), 3u);
    EXPECT_GE(count(text, "\"name\":\"QUEUE\",\"ph\":\"X\""), 3u * 5u);
    EXPECT_NE(text.find("\"algorithm\":\""), std::string::npos);
    EXPECT_NE(text.find("\"process_set\":0"), std::string::npos);
    EXPECT_GE(count(text, "\"name\":\"CYCLE_START\""), 3u);
    // Negotiation: the first step always; every step without the cache. Each with both ranks.
    const size_t negotiations = count(text, "\"name\":\"NEGOTIATE_ALLREDUCE\"");
    if (std::string(cache) == "0") {
      EXPECT_GE(negotiations, 3u * 4u);
    } else {
      EXPECT_GE(negotiations, 4u);
      EXPECT_LT(negotiations, 3u * 4u);
    }
    EXPECT_GE(count(text, "\"name\":\"NEGOTIATE_ALLGATHER\""), 1u);
    EXPECT_GE(count(text, "\"name\":\"1\",\"ph\":\"i\""), 5u);  // rank 1's arrivals
    EXPECT_EQ(t->dropped(), 0u);
  }
  std::filesystem::remove(path);
}

TEST(Timeline, FusionBufferCopies) {
  // A prescaled fused allreduce goes through the fusion buffer.
  const std::string path = tempPath("fusion");
  Cluster cluster(2);
  auto t = attach(cluster, path, false);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<std::vector<float>> in(2, std::vector<float>(8, 1.0f + rank)), out(2, std::vector<float>(8));
    std::vector<TensorView> ins, outs;
    for (int i = 0; i < 2; ++i) {
      ins.push_back(view(in[i], DataType::kFloat32));
      outs.push_back(view(out[i], DataType::kFloat32));
    }
    Options o = named("f");
    o.prescale = 2.0;
    rt.groupedAllreduce(ins, outs, o)->wait();
  });
  detach(cluster, t);
  const std::string text = readFile(path);
  ASSERT_TRUE(JsonChecker(text).valid());
  EXPECT_EQ(count(text, "\"name\":\"MEMCPY_IN_FUSION_BUFFER\""), 2u);
  EXPECT_EQ(count(text, "\"name\":\"MEMCPY_OUT_FUSION_BUFFER\""), 2u);
  EXPECT_EQ(count(text, "\"name\":\"CYCLE_START\""), 0u);  // not marked
  std::filesystem::remove(path);
}

TEST(Timeline, ParsesWhileBeingWritten) {
  // A reader reads the file over and over while the ranks run allreduces; every read must parse.
  // The ranks keep going until the reader has seen events in the file (so it read a file being
  // written, not only the header), bounded by a generous step count; nothing here depends on how
  // fast either side is.
  const std::string path = tempPath("live");
  Cluster cluster(2);
  WriterOptions options;
  options.flushInterval = std::chrono::milliseconds(5);
  auto t = attach(cluster, path, true, options);
  std::atomic<bool> done{false}, sawEvents{false};
  std::atomic<int> invalid{0};
  std::thread reader([&] {
    while (!done.load()) {
      const std::string closed = asClosedArray(readFile(path));
      if (!JsonChecker(closed).valid() && invalid.fetch_add(1) == 0) {
        ADD_FAILURE() << closed.substr(closed.size() > 400 ? closed.size() - 400 : 0);
      }
      if (closed.find("\"ALLREDUCE\"") != std::string::npos) sawEvents = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  cluster.run([&](int rank, engine::Runtime& rt) {
    // Both ranks run the same number of steps: rank 0 decides when to stop and tells rank 1
    // through the allreduce itself (a 0 in the first element ends the loop on both).
    constexpr int kMaxSteps = 200000;
    for (int step = 0; step < kMaxSteps; ++step) {
      const float go = rank == 0 ? (sawEvents.load() && step >= 20 ? 0.0f : 1.0f) : 1.0f;
      std::vector<float> in(64, go), out(64);
      rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("x" + std::to_string(step % 7)))
          ->wait();
      if (out[0] < 2.0f) break;
    }
  });
  done = true;
  reader.join();
  EXPECT_TRUE(sawEvents.load()) << "the reader never saw an ALLREDUCE event in the file while it was written";
  EXPECT_EQ(invalid.load(), 0);
  detach(cluster, t);
  EXPECT_TRUE(JsonChecker(readFile(path)).valid());
  std::filesystem::remove(path);
}

// The file catches up on its own once records stop coming: no close(), no half-full queue, and a
// flush interval far longer than the test. The reader waits for the events to appear (bounded by a
// generous deadline that only a broken writer reaches).
TEST(Timeline, EventsReachTheFileOnceTheWriterGoesIdle) {
  const std::string path = tempPath("idle");
  WriterOptions options;
  options.flushInterval = std::chrono::hours(1);
  timeline::TimelineWriter writer(path, options);
  auto waitFor = [&](const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string text = readFile(path);
    while (text.find(what) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      text = readFile(path);
    }
    return text;
  };
  // A first burst after the start, then a second one after the writer went idle again.
  for (int burst = 1; burst <= 2; ++burst) {
    const std::string name = "burst" + std::to_string(burst);
    writer.addRow(static_cast<uint32_t>(burst), name);
    std::vector<timeline::Record> records(3);
    for (auto& r : records) {
      r.row = static_cast<uint32_t>(burst);
      r.activity = timeline::Activity::kCollective;
      r.algorithm = "ring";
      r.bytes = 64;
    }
    writer.push(records);
    const std::string text = waitFor("\"args\":{\"name\":\"" + name + "\"}");
    const std::string closed = asClosedArray(text);
    EXPECT_TRUE(JsonChecker(closed).valid()) << closed;
    // The row's name and its three events, written together.
    EXPECT_EQ(count(text, "\"name\":\"ALLREDUCE\",\"ph\":\"X\",\"pid\":0,\"tid\":" + std::to_string(burst) + ","), 3u)
        << text;
  }
  // A lone instant event (autotune's) is written the same way.
  writer.pushInstant("AUTOTUNE", 0, "{\"decision\":\"final\"}");
  EXPECT_NE(waitFor("\"AUTOTUNE\"").find("\"decision\":\"final\""), std::string::npos);
  writer.close();
  EXPECT_TRUE(JsonChecker(readFile(path)).valid());
  std::filesystem::remove(path);
}

TEST(Timeline, DiskBound) {
  const std::string path = tempPath("bound");
  const int64_t maxBytes = 128 * 1024;
  Cluster cluster(2);
  WriterOptions options;
  options.maxBytes = maxBytes;
  options.flushInterval = std::chrono::milliseconds(10);
  auto t = attach(cluster, path, true, options);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < 400; ++step) {
      std::vector<std::vector<float>> in(8, std::vector<float>(4, 1.0f + rank)), out(8, std::vector<float>(4));
      std::vector<TensorView> ins, outs;
      for (int i = 0; i < 8; ++i) {
        ins.push_back(view(in[i], DataType::kFloat32));
        outs.push_back(view(out[i], DataType::kFloat32));
      }
      rt.groupedAllreduce(ins, outs, named("layer"))->wait();
    }
  });
  detach(cluster, t);
  const std::string live = readFile(path), previous = readFile(path + ".1"), head = readFile(path + ".head");
  ASSERT_FALSE(head.empty()) << "expected the first segment kept as the head";
  ASSERT_FALSE(previous.empty()) << "expected at least one rotation after the head";
  EXPECT_GE(t->rotations(), 2u);
  EXPECT_LE(static_cast<int64_t>(head.size() + live.size() + previous.size()), maxBytes);
  EXPECT_LE(static_cast<int64_t>(head.size()), maxBytes / 4);
  EXPECT_LE(static_cast<int64_t>(live.size()), maxBytes * 3 / 8);
  EXPECT_LE(static_cast<int64_t>(previous.size()), maxBytes * 3 / 8);
  // Each file is a trace on its own: valid, with its rows named.
  for (const std::string* text : {&head, &live, &previous}) {
    EXPECT_TRUE(JsonChecker(*text).valid());
    EXPECT_NE(text->find("\"args\":{\"name\":\"layer_1of8\"}"), std::string::npos);
    EXPECT_NE(text->find("\"name\":\"ALLREDUCE\""), std::string::npos);
  }
  // The head holds the start of the job (its one negotiation: later steps hit the cache); the
  // rotating pair the end.
  EXPECT_NE(head.find("\"name\":\"NEGOTIATE_ALLREDUCE\""), std::string::npos);
  EXPECT_LT(firstTimestamp(head), firstTimestamp(previous));
  EXPECT_LT(firstTimestamp(previous), firstTimestamp(live));
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".1");
  std::filesystem::remove(path + ".head");
}

TEST(Timeline, AFreshTimelineRemovesTheSegmentsOfAnEarlierOne) {
  const std::string path = tempPath("stale");
  for (const char* suffix : {".1", ".head"}) {
    std::FILE* f = std::fopen((path + suffix).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("[\n]\n", f);
    std::fclose(f);
  }
  {
    timeline::TimelineWriter writer(path, WriterOptions{});
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".1"));
  EXPECT_FALSE(std::filesystem::exists(path + ".head"));
  EXPECT_TRUE(JsonChecker(readFile(path)).valid());
  std::filesystem::remove(path);
}

// Rank 0's tuner for the AUTOTUNE test: two knob changes, each with the decision behind it.
class TwoStepTuner : public engine::Tuner {
 public:
  explicit TwoStepTuner(engine::Knobs base) : base_(base) {}
  engine::EventMask interests() const override { return 0; }
  void onEvent(const engine::EngineEvent&) override {}
  std::optional<engine::Knobs> poll() override {
    if (++polls_ % 4 != 0 || handed_ >= 2) return std::nullopt;
    engine::Knobs k = base_;
    k.fusionThreshold = handed_ == 0 ? 4096 : 1 << 20;
    k.cacheEnabled = handed_ != 0;
    decision_ = handed_ == 0 ? Decision{1.5e8, "sample"} : Decision{2.5e8, "final"};
    ++handed_;
    return k;
  }
  bool done() const override { return handed_ >= 2; }
  Decision lastDecision() const override { return decision_; }

 private:
  engine::Knobs base_;
  Decision decision_;
  int polls_ = 0;
  int handed_ = 0;
};

TEST(Timeline, AutotuneKnobChangesAreInstantEventsWithTheirValuesAndScore) {
  const std::string path = tempPath("autotune");
  Cluster cluster(2);
  auto t = attach(cluster, path, false);
  auto tuner = std::make_shared<TwoStepTuner>(cluster[0].knobs());
  cluster[0].setTuner(tuner);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < 40; ++step) {
      std::vector<float> in(256, 1.0f + rank), out(256);
      rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("w"))->wait();
    }
  });
  detach(cluster, t);
  ASSERT_TRUE(tuner->done());
  const std::string text = readFile(path);
  EXPECT_TRUE(JsonChecker(text).valid());
  EXPECT_EQ(count(text, "\"name\":\"AUTOTUNE\""), 2u) << text;
  EXPECT_NE(text.find("\"args\":{\"fusion_threshold\":4096,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"cache\":false,\"hierarchical\":true,\"decision\":\"sample\","
                      "\"score_bytes_per_s\":150000000.0}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"fusion_threshold\":1048576,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"decision\":\"final\",\"score_bytes_per_s\":250000000.0}"), std::string::npos) << text;
  std::filesystem::remove(path);
}

TEST(Timeline, DropsWhenTheQueueIsFull) {
  const std::string path = tempPath("drops");
  WriterOptions options;
  options.queueCapacity = 4;
  options.flushInterval = std::chrono::seconds(10);
  timeline::TimelineWriter writer(path, options);
  writer.addRow(1, "t");
  std::vector<timeline::Record> records(10);
  for (auto& r : records) r.row = 1;
  writer.push(records);
  EXPECT_EQ(writer.dropped(), 6u);
  writer.close();
  const std::string text = readFile(path);
  EXPECT_TRUE(JsonChecker(text).valid());
  EXPECT_NE(text.find("\"dropped_events\":6"), std::string::npos);
  EXPECT_EQ(count(text, "\"name\":\"QUEUE\""), 4u);
  std::filesystem::remove(path);
}

TEST(Timeline, Settings) {
  auto s = timeline::TimelineSettings::fromEnvironment(mapEnvironment({{"HOROVOD_TIMELINE", "DYNAMIC"}}));
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.path, "");
  s = timeline::TimelineSettings::fromEnvironment(
      mapEnvironment({{"HOROVOD_TIMELINE", "/tmp/t.json"}, {"HOROVOD_TIMELINE_MARK_CYCLES", "1"}}));
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.path, "/tmp/t.json");
  EXPECT_TRUE(s.markCycles);
  EXPECT_EQ(s.maxBytes, 50'000'000);
  s = timeline::TimelineSettings::fromEnvironment(mapEnvironment({}));
  EXPECT_FALSE(s.enabled);
  expectThrowWith<InvalidArgument>(
      [] { timeline::TimelineSettings::fromEnvironment(mapEnvironment({{"HOROVOD_TIMELINE_MAX_BYTES", "100"}})); },
      "HOROVOD_TIMELINE_MAX_BYTES");
  expectThrowWith<InvalidArgument>(
      [] { timeline::TimelineSettings::fromEnvironment(mapEnvironment({{"HOROVOD_TIMELINE_MARK_CYCLES", "maybe"}})); },
      "HOROVOD_TIMELINE_MARK_CYCLES='maybe'");
  expectThrowWith<Error>([] { Timeline("/nonexistent-dir/x/t.json", false); }, "cannot open");
}

}  // namespace
}  // namespace hvd::test
