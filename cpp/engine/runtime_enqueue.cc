// Runtime: enqueueing (any thread). Validates synchronously with Horovod's messages, builds the
// entries, pushes them on the TensorQueue and wakes the background thread.
#include <algorithm>
#include <atomic>
#include <numeric>

#include "collectives/collectives.h"
#include "common/check.h"
#include "engine/fused_layout.h"
#include "engine/runtime.h"
#include "transport/peer_memory.h"

namespace hvd::engine {
namespace {

bool sameShape(const TensorView& a, const TensorView& b) { return a.dtype == b.dtype && a.shape == b.shape; }

}  // namespace

std::shared_ptr<WorkImpl> Runtime::newWork(int members) {
  return std::make_shared<WorkImpl>(members, callerProgressUs_.load(std::memory_order_relaxed) > 0 ? gate_ : nullptr);
}

void Runtime::wakeEngine() {
  if (callerProgressUs_.load(std::memory_order_relaxed) > 0) {
    // Nobody runs the engine (the background thread left fresh work to callers): do the
    // per-tensor request work here, so that a caller that waits finds its burst ready to send.
    std::unique_lock<std::mutex> token(gate_->token(), std::try_to_lock);
    if (token.owns_lock() && gate_->open()) {
      collectRequests(outgoing_);
      return;  // holding the token, nobody can be blocked in awaitWork
    }
  }
  // Pairs with the fence in awaitWork(): either it sees our entries before it blocks, or we see
  // it idle and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (idle_.load(std::memory_order_relaxed)) transport_->wake();
}

void Runtime::checkRunning() const {
  if (!initialized_) throw Error(kNotInitializedMessage, ErrorCode::kNotInitialized);
  queue_.throwIfClosed();
}

ProcessSetInfo Runtime::checkProcessSet(const char* opName, int processSet, int root) const {
  if (processSet == 0) {
    // The global set (never removed): answered without the table's lock, on every enqueue.
    return ProcessSetInfo{topology_.size, topology_.rank, root >= 0 && root < topology_.size};
  }
  auto info = sets_.lookup(processSet, root);
  if (!info) {
    throw InvalidArgument(std::string(opName) + ": Process set provided does not exist, or has not been registered.");
  }
  if (info->myIndex < 0) {
    throw InvalidArgument(std::string(opName) + ": Rank " + std::to_string(topology_.rank) +
                          " is not a member of the provided process set.");
  }
  return *info;
}

// A tensor off the CPU: both views on one device, and a collective backend for it in this build.
void Runtime::checkDevices(const char* opName, const TensorView& in, const TensorView& out) const {
  if (out.data != nullptr && !out.device.sameDevice(in.device)) {
    throw InvalidArgument(std::string(opName) + ": the output is on " + deviceName(out.device) + " but the input on " +
                          deviceName(in.device) + "; both must be on one device.");
  }
  if (!backendServes(in.device.kind)) {
    throw InvalidArgument(std::string(opName) + ": no collective backend in this build runs on " +
                          deviceName(in.device) +
                          "; move the tensor to the CPU or use a build with support for that device.");
  }
}

std::string Runtime::autoName(const std::string& name) {
  if (!name.empty()) return name;
  return "noname." + std::to_string(++nonameCounter_);
}

EntryPtr Runtime::makeEntry(Kind kind, const char* opName, const TensorView& in, const TensorView& out,
                            const Options& options, const std::string& name, const ProcessSetInfo& set) {
  EntryPtr e = queue_.acquire();  // a recycled entry: assigning name and shape reuses its buffers
  Request& r = e->request;
  r.params.kind = kind;
  r.params.processSet = options.processSet;
  r.name.assign(name);
  r.params.dtype = in.dtype;
  r.shape.assign(in.shape.begin(), in.shape.end());
  r.params.op = options.op;
  r.params.prescale = options.prescale;
  r.params.postscale = options.postscale;
  r.oneOffName = options.oneOffName || options.name.empty();
  e->input = in.data;
  e->output = out.data;
  if (!in.device.isCpu() || !out.device.isCpu()) checkDevices(opName, in, out);
  r.params.device = deviceId(in.device);
  e->stream = in.device.stream;
  for (auto d : in.shape) {
    if (d < 0)
      throw InvalidArgument(std::string(opName) + ": negative dimension in tensor shape " + shapeString(in.shape));
  }
  if (in.data == nullptr && in.numElements() > 0) {
    throw InvalidArgument(std::string(opName) + ": tensor data is null");
  }
  if (kind == Kind::kAllreduce && options.op == ReduceOp::kAdasum) r.params.kind = Kind::kAdasum;
  if (r.params.kind == Kind::kAllreduce && out.data != nullptr && findSharedBuffer(out.data, out.bytes())) {
    // Into a shared buffer (in place, or from any input): ask for the allreduce over the
    // members' shared outputs (collectives.h: AllreduceOptions::sharedOutputs) if the whole set
    // can map each other's memory.
    auto ranks = sets_.ranks(options.processSet);
    r.params.sharedInPlace = ranks && collectives::sharedOutputsPossible(*transport_, topology_.hostOf, *ranks);
  }
  if (kind == Kind::kAllreduce || kind == Kind::kReducescatter) {
    if (out.data == nullptr && out.numElements() > 0) {
      throw InvalidArgument(std::string(opName) + ": output data is null");
    }
  }
  (void)set;
  return e;
}

WorkPtr Runtime::enqueue(std::vector<EntryPtr> entries, std::shared_ptr<WorkImpl> work) {
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i]->work = work;
    entries[i]->member = static_cast<int>(i);
  }
  // Before the push: once pushed, the engine may publish the entries' next events.
  if (observers_.wants(EngineEventKind::kEnqueue)) [[unlikely]] {
    for (const auto& e : entries) publishEntry(EngineEventKind::kEnqueue, *e);
  }
  queue_.push(entries);
  wakeEngine();
  return work;
}

// ---- Allreduce -------------------------------------------------------------------------------

WorkPtr Runtime::allreduce(const TensorView& in, const TensorView& out, const Options& options) {
  // The hot path of training loops: one entry, no temporary vectors.
  checkRunning();
  ProcessSetInfo set = checkProcessSet("Allreduce", options.processSet);
  if (!sameShape(in, out)) {
    throw InvalidArgument("Allreduce: output tensor " + shapeString(out.shape) + " " +
                          std::string(dataTypeName(out.dtype)) + " does not match input " + shapeString(in.shape) +
                          " " + std::string(dataTypeName(in.dtype)));
  }
  EntryPtr e = makeEntry(Kind::kAllreduce, "Allreduce", in, out, options,
                         options.name.empty() ? autoName(options.name) : options.name, set);
  auto work = newWork(1);
  e->work = work;
  // Before the push: once pushed, the engine may publish the entry's next events (or recycle it).
  if (observers_.wants(EngineEventKind::kEnqueue)) [[unlikely]]
    publishEntry(EngineEventKind::kEnqueue, *e);
  queue_.push(e);
  wakeEngine();
  return work;
}

WorkPtr Runtime::groupedAllreduce(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                                  const Options& options) {
  checkRunning();
  ProcessSetInfo set = checkProcessSet("Allreduce", options.processSet);
  if (in.empty() || in.size() != out.size()) {
    throw InvalidArgument("Allreduce: expected as many outputs as inputs (got " + std::to_string(in.size()) + " and " +
                          std::to_string(out.size()) + ")");
  }
  const bool grouped = in.size() > 1;
  std::string base = autoName(options.name);
  std::vector<EntryPtr> entries;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!sameShape(in[i], out[i])) {
      throw InvalidArgument("Allreduce: output tensor " + shapeString(out[i].shape) + " " +
                            std::string(dataTypeName(out[i].dtype)) + " does not match input " +
                            shapeString(in[i].shape) + " " + std::string(dataTypeName(in[i].dtype)));
    }
    std::string name = grouped ? base + "_" + std::to_string(i + 1) + "of" + std::to_string(in.size()) : base;
    auto e = makeEntry(Kind::kAllreduce, "Allreduce", in[i], out[i], options, name, set);
    if (grouped) {
      e->request.group = base;
      e->request.groupSize = static_cast<int32_t>(in.size());
    }
    entries.push_back(std::move(e));
  }
  return enqueue(std::move(entries), newWork(static_cast<int>(in.size())));
}

// ---- Allgather -------------------------------------------------------------------------------

WorkPtr Runtime::allgather(const TensorView& in, const Options& options) { return groupedAllgather({in}, options); }

WorkPtr Runtime::groupedAllgather(const std::vector<TensorView>& in, const Options& options) {
  checkRunning();
  ProcessSetInfo set = checkProcessSet("Allgather", options.processSet);
  if (in.empty()) throw InvalidArgument("Allgather: no tensors given");
  const bool grouped = in.size() > 1;
  std::string base = autoName(options.name);
  std::vector<EntryPtr> entries;
  for (size_t i = 0; i < in.size(); ++i) {
    std::string name = grouped ? base + "_" + std::to_string(i + 1) + "of" + std::to_string(in.size()) : base;
    auto e = makeEntry(Kind::kAllgather, "Allgather", in[i], TensorView{}, options, name, set);
    e->request.params.op = ReduceOp::kSum;
    e->request.params.prescale = e->request.params.postscale = 1.0;
    if (grouped) {
      e->request.group = base;
      e->request.groupSize = static_cast<int32_t>(in.size());
    }
    entries.push_back(std::move(e));
  }
  return enqueue(std::move(entries), newWork(static_cast<int>(in.size())));
}

// ---- Broadcast -------------------------------------------------------------------------------

WorkPtr Runtime::broadcast(const TensorView& tensor, const Options& options) {
  checkRunning();
  ProcessSetInfo set = checkProcessSet("Broadcast", options.processSet, options.root);
  if (!set.rootIsMember) {
    throw InvalidArgument("broadcast received invalid root rank " + std::to_string(options.root) +
                          " for provided process set");
  }
  auto e = makeEntry(Kind::kBroadcast, "Broadcast", tensor, tensor, options, autoName(options.name), set);
  e->request.params.root = options.root;
  e->request.params.op = ReduceOp::kSum;
  e->request.params.prescale = e->request.params.postscale = 1.0;
  std::vector<EntryPtr> entries;
  entries.push_back(std::move(e));
  return enqueue(std::move(entries), newWork(1));
}

// ---- Alltoall --------------------------------------------------------------------------------

WorkPtr Runtime::alltoall(const TensorView& in, const Options& options) {
  checkRunning();
  ProcessSetInfo set = checkProcessSet("Alltoall", options.processSet);
  std::vector<int32_t> splits = options.splits;
  if (!in.shape.empty()) {
    const int64_t rows = in.shape[0];
    if (splits.empty()) {
      if (rows % set.size != 0) {
        throw InvalidArgument(
            "splits not provided, but first dimension of tensor is not an even multiple of the number of workers.");
      }
      splits.assign(static_cast<size_t>(set.size), static_cast<int32_t>(rows / set.size));
    } else {
      if (static_cast<int>(splits.size()) != set.size) {
        throw InvalidArgument("Number of entries in splits does not equal number of workers.");
      }
      if (std::any_of(splits.begin(), splits.end(), [](int32_t s) { return s < 0; })) {
        throw InvalidArgument("alltoall splits entries must be non-negative.");
      }
      int64_t sum = std::accumulate(splits.begin(), splits.end(), int64_t(0));
      if (sum > rows) throw InvalidArgument("Sum of splits entries is greater than the first dimension of tensor.");
    }
  } else {
    // A 0-d tensor fails in negotiation with Horovod's message; send no rows meanwhile.
    splits.assign(static_cast<size_t>(set.size), 0);
  }
  auto e = makeEntry(Kind::kAlltoall, "Alltoall", in, TensorView{}, options, autoName(options.name), set);
  e->request.splits = std::move(splits);
  e->request.params.op = ReduceOp::kSum;
  e->request.params.prescale = e->request.params.postscale = 1.0;
  std::vector<EntryPtr> entries;
  entries.push_back(std::move(e));
  return enqueue(std::move(entries), newWork(1));
}

// ---- Reducescatter ---------------------------------------------------------------------------

WorkPtr Runtime::reducescatter(const TensorView& in, const TensorView& out, const Options& options) {
  return groupedReducescatter({in}, {out}, options);
}

WorkPtr Runtime::groupedReducescatter(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                                      const Options& options) {
  checkRunning();
  ProcessSetInfo set = checkProcessSet("Reducescatter", options.processSet);
  if (options.op != ReduceOp::kSum && options.op != ReduceOp::kAverage) {
    throw Error("Reducescatter currently only supports AVERAGE and SUM.");
  }
  if (in.empty() || in.size() != out.size()) {
    throw InvalidArgument("Reducescatter: expected as many outputs as inputs (got " + std::to_string(in.size()) +
                          " and " + std::to_string(out.size()) + ")");
  }
  const bool grouped = in.size() > 1;
  std::string base = autoName(options.name);
  std::vector<EntryPtr> entries;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].shape.empty()) {
      std::vector<int64_t> expected = in[i].shape;
      expected[0] = reducescatterRows(in[i].shape[0], set.size, set.myIndex);
      if (out[i].dtype != in[i].dtype || out[i].shape != expected) {
        throw InvalidArgument("Reducescatter: output tensor must be " + std::string(dataTypeName(in[i].dtype)) + " " +
                              shapeString(expected) + " on this rank, got " + std::string(dataTypeName(out[i].dtype)) +
                              " " + shapeString(out[i].shape));
      }
    }
    std::string name = grouped ? base + "_" + std::to_string(i + 1) + "of" + std::to_string(in.size()) : base;
    auto e = makeEntry(Kind::kReducescatter, "Reducescatter", in[i], out[i], options, name, set);
    // Average = Sum * (postscale / n): folded here, so negotiation compares folded factors.
    if (options.op == ReduceOp::kAverage) e->request.params.postscale = options.postscale / set.size;
    if (grouped) {
      e->request.group = base;
      e->request.groupSize = static_cast<int32_t>(in.size());
    }
    entries.push_back(std::move(e));
  }
  return enqueue(std::move(entries), newWork(static_cast<int>(in.size())));
}

// ---- Barrier, join ---------------------------------------------------------------------------

WorkPtr Runtime::barrier(int processSet) {
  checkRunning();
  Options options;
  options.processSet = processSet;
  ProcessSetInfo set = checkProcessSet("Barrier", processSet);
  TensorView none;
  none.dtype = DataType::kUInt8;
  none.shape = {0};
  auto e = makeEntry(Kind::kBarrier, "Barrier", none, none, options, "barrier.noname", set);
  e->request.params.dtype = DataType::kUInt8;
  std::vector<EntryPtr> entries;
  entries.push_back(std::move(e));
  return enqueue(std::move(entries), newWork(1));
}

WorkPtr Runtime::join() {
  checkRunning();
  auto e = std::make_unique<Entry>();
  e->request.params.kind = Kind::kJoin;
  e->request.params.processSet = 0;
  e->request.name = "join.noname";
  e->request.params.dtype = DataType::kUInt8;
  std::vector<EntryPtr> entries;
  entries.push_back(std::move(e));
  return enqueue(std::move(entries), newWork(1));
}

}  // namespace hvd::engine
