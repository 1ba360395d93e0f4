// Test harness for the engine: N ranks as threads of this process (support/rank_threads.h),
// each with its own Runtime over one shared MemoryStore and the "local" transport.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/runtime.h"
#include "store/memory_store.h"
#include "support/rank_threads.h"

namespace hvd::test {

using Env = std::vector<std::pair<std::string, std::string>>;

inline Env rankEnv(int rank, int size, const Env& extra) {
  Env env = {{"HOROVOD_RANK", std::to_string(rank)},
             {"HOROVOD_SIZE", std::to_string(size)},
             {"HOROVOD_TRANSPORT", "local"},
             {"HOROVOD_HOSTNAME", "testhost"},
             {"HOROVOD_GLOO_TIMEOUT_SECONDS", "20"}};
  for (const auto& kv : extra) {
    bool replaced = false;
    for (auto& e : env) {
      if (e.first == kv.first) {
        e.second = kv.second;
        replaced = true;
      }
    }
    if (!replaced) env.push_back(kv);
  }
  return env;
}

// N initialized runtimes. run() executes a body per rank concurrently.
class Cluster {
 public:
  explicit Cluster(int n, Env extra = {}, InitOptions options = {},
                   std::shared_ptr<Store> store = std::make_shared<MemoryStore>())
      : n_(n), store_(std::move(store)), runtimes_(static_cast<size_t>(n)) {
    runRankThreads(n, [&](int r) {
      auto config = engine::Config::fromEnvironment(mapEnvironment(rankEnv(r, n, extra)));
      runtimes_[r] = std::make_unique<engine::Runtime>(config, store_);
      runtimes_[r]->init(options);
    });
  }
  ~Cluster() { shutdown(); }

  int size() const { return n_; }
  engine::Runtime& operator[](int r) { return *runtimes_[r]; }
  const std::shared_ptr<Store>& store() const { return store_; }

  void run(const std::function<void(int, engine::Runtime&)>& body) {
    runRankThreads(n_, [&](int r) { body(r, *runtimes_[r]); });
  }
  void shutdown() {
    runRankThreads(n_, [&](int r) {
      if (runtimes_[r]) runtimes_[r]->shutdown();
    });
  }

 private:
  int n_;
  std::shared_ptr<Store> store_;
  std::vector<std::unique_ptr<engine::Runtime>> runtimes_;
};

// Typed tensor helpers.
template <typename T>
TensorView view(std::vector<T>& data, DataType dtype, std::vector<int64_t> shape = {}) {
  TensorView v;
  v.data = data.data();
  v.dtype = dtype;
  v.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(data.size())} : std::move(shape);
  return v;
}

inline Options named(const std::string& name, ReduceOp op = ReduceOp::kSum, int processSet = 0) {
  Options o;
  o.name = name;
  o.op = op;
  o.processSet = processSet;
  return o;
}

// Expects `fn` to throw E whose message contains `text`.
template <typename E, typename F>
void expectThrowWith(F&& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception containing: " << text;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type; message: " << e.what();
  }
}

}  // namespace hvd::test
