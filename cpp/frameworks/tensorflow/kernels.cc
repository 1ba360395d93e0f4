// The Horovod TensorFlow kernel library: graph ops whose kernels enqueue a collective in the
// core of horovod._core and finish the op when it has completed.
//
// Loaded with tf.load_op_library() by horovod.tensorflow after `import tensorflow`: its static
// initializer resolves TensorFlow's C API (tf_c_api.h) and registers the ops and their CPU
// kernels; then horovod.tensorflow hands it the core's hvd::ApiTable (horovod_tf_bind) and, when
// the core has the CUDA backend, registers the collectives' GPU kernels
// (horovod_tf_register_gpu_kernels; GPU tensors are ordered by the whole GPU: Call::device).
// Nothing here is compiled against TensorFlow or links the core.
//
// Each op node carries its collective's settings as attributes (core name, op, factors, process
// set) and handles a whole group of tensors: one node per gradient group, one crossing into the
// core. Ops are stateful, so inside tf.function they keep their program order. A kernel enqueues
// its operations and returns; the op completes when they have (see run()).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "async_done.h"
#include "horovod/api_table.h"
#include "horovod/errors.h"
#include "horovod/operation.h"
#include "tf_c_api.h"

namespace hvd::tf {
namespace {

TfApi gTf;
std::string gLoadError;  // empty: ops and kernels registered
std::atomic<const ApiTable*> gCore{nullptr};
std::atomic<uint64_t> gDeferredOps{0};  // ops finished after their kernel returned (for tests)

// ---- small helpers -----------------------------------------------------------------------------

class Status {
 public:
  Status() : s_(gTf.NewStatus()) {}
  ~Status() { gTf.DeleteStatus(s_); }
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;
  TF_Status* get() { return s_; }
  bool ok() const { return gTf.GetCode(s_) == kTfOk; }
  // Throws the TensorFlow failure as an hvd::Error carrying its message (TensorFlow's own code
  // is lost: these are allocation and attribute failures, reported as unknown).
  void check(const char* what) const {
    if (!ok()) throw Error(std::string(what) + ": " + gTf.Message(s_));
  }

 private:
  TF_Status* s_;
};

DataType hvdType(int tfType) {
  switch (tfType) {
    case kTfFloat: return DataType::kFloat32;
    case kTfDouble: return DataType::kFloat64;
    case kTfInt32: return DataType::kInt32;
    case kTfUInt8: return DataType::kUInt8;
    case kTfInt16: return DataType::kInt16;
    case kTfInt8: return DataType::kInt8;
    case kTfInt64: return DataType::kInt64;
    case kTfBool: return DataType::kBool;
    case kTfBFloat16: return DataType::kBFloat16;
    case kTfUInt16: return DataType::kUInt16;
    case kTfHalf: return DataType::kFloat16;
    default:
      throw InvalidArgument("Horovod: TensorFlow dtype " + std::to_string(tfType) +
                            " is not supported");
  }
}

int tfType(DataType type) {
  switch (type) {
    case DataType::kFloat32: return kTfFloat;
    case DataType::kFloat64: return kTfDouble;
    case DataType::kInt32: return kTfInt32;
    case DataType::kUInt8: return kTfUInt8;
    case DataType::kInt16: return kTfInt16;
    case DataType::kInt8: return kTfInt8;
    case DataType::kInt64: return kTfInt64;
    case DataType::kBool: return kTfBool;
    case DataType::kBFloat16: return kTfBFloat16;
    case DataType::kUInt16: return kTfUInt16;
    case DataType::kFloat16: return kTfHalf;
  }
  return kTfFloat;
}

std::vector<int64_t> dimsOf(const TF_Tensor* t) {
  std::vector<int64_t> dims(static_cast<size_t>(gTf.NumDims(t)));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = gTf.Dim(t, static_cast<int>(d));
  return dims;
}

TensorView viewOf(const TF_Tensor* t) {
  TensorView v;
  v.data = gTf.TensorData(t);
  v.dtype = hvdType(gTf.TensorType(t));
  v.shape = dimsOf(t);
  return v;
}

const ApiTable& core() {
  const ApiTable* table = gCore.load(std::memory_order_acquire);
  if (table == nullptr) {
    throw InvalidArgument(
        "Horovod TensorFlow ops ran before horovod.tensorflow bound them to the core: import "
        "horovod.tensorflow (not this library directly) and call hvd.init()");
  }
  return *table;
}

// ---- attributes --------------------------------------------------------------------------------

// One op node's settings, read once when TensorFlow builds its kernel.
struct Config {
  std::string name;                // core name (or newline-separated names: HorovodBroadcast)
  int reduceOp = 1;
  float prescale = 1.0f;
  float postscale = 1.0f;
  int processSet = 0;
  bool oneOff = false;
  bool grouped = false;
  int root = 0;
  std::string what;                // HorovodTopology
  bool gpu = false;                // the kernel registered for TensorFlow's GPUs

  Options options(std::string opName) const {
    Options o;
    o.name = std::move(opName);
    o.op = static_cast<ReduceOp>(reduceOp);
    o.prescale = prescale;
    o.postscale = postscale;
    o.processSet = processSet;
    o.oneOffName = oneOff;
    o.root = root;
    return o;
  }
};

enum Attr : unsigned {
  kName = 1u << 0,
  kReduce = 1u << 1,      // reduce_op, prescale, postscale
  kProcessSet = 1u << 2,
  kOneOff = 1u << 3,
  kGrouped = 1u << 4,
  kRoot = 1u << 5,
  kWhat = 1u << 6,
};

std::string stringAttr(TF_OpKernelConstruction* ctx, const char* attr, Status& st) {
  int32_t listSize = 0, total = 0;
  gTf.GetAttrSize(ctx, attr, &listSize, &total, st.get());
  if (!st.ok() || total <= 0) return {};
  std::string value(static_cast<size_t>(total), '\0');
  gTf.GetAttrString(ctx, attr, value.data(), value.size(), st.get());
  return value;
}

template <unsigned kAttrs, bool kGpu = false>
void* createKernel(TF_OpKernelConstruction* ctx) {
  auto config = std::make_unique<Config>();
  config->gpu = kGpu;
  Status st;
  TF_Bool flag = 0;
  if ((kAttrs & kName) && st.ok()) config->name = stringAttr(ctx, "hvd_name", st);
  if ((kAttrs & kWhat) && st.ok()) config->what = stringAttr(ctx, "what", st);
  if ((kAttrs & kReduce) && st.ok())
    gTf.GetAttrInt32(ctx, "reduce_op", &config->reduceOp, st.get());
  if ((kAttrs & kReduce) && st.ok()) gTf.GetAttrFloat(ctx, "prescale", &config->prescale, st.get());
  if ((kAttrs & kReduce) && st.ok())
    gTf.GetAttrFloat(ctx, "postscale", &config->postscale, st.get());
  if ((kAttrs & kProcessSet) && st.ok())
    gTf.GetAttrInt32(ctx, "process_set", &config->processSet, st.get());
  if ((kAttrs & kRoot) && st.ok()) gTf.GetAttrInt32(ctx, "root_rank", &config->root, st.get());
  if ((kAttrs & kOneOff) && st.ok()) {
    gTf.GetAttrBool(ctx, "one_off", &flag, st.get());
    config->oneOff = flag != 0;
  }
  if ((kAttrs & kGrouped) && st.ok()) {
    gTf.GetAttrBool(ctx, "grouped", &flag, st.get());
    config->grouped = flag != 0;
  }
  if (!st.ok()) {
    gTf.OpKernelConstructionFailure(ctx, st.get());
    return nullptr;
  }
  return config.release();
}

void destroyKernel(void* kernel) { delete static_cast<Config*>(kernel); }

// ---- one kernel invocation ---------------------------------------------------------------------

void fail(TF_OpKernelContext* ctx, int code, const std::string& message) {
  Status st;
  gTf.SetStatus(st.get(), code, message.c_str());
  gTf.OpKernelContextFailure(ctx, st.get());
}

// Reports the exception being handled as the op's failure, with the TensorFlow code matching the
// core's error kind (horovod.tensorflow maps the codes back to Horovod's exceptions).
void failWithCurrentException(TF_OpKernelContext* ctx) {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    fail(ctx, kTfInvalidArgument, e.what());
  } catch (const MismatchError& e) {
    fail(ctx, kTfFailedPrecondition, e.what());
  } catch (const Aborted& e) {
    fail(ctx, kTfAborted, e.what());
  } catch (const std::exception& e) {
    fail(ctx, kTfUnknown, e.what());
  } catch (...) {
    fail(ctx, kTfUnknown, "Horovod: unknown error");
  }
}

// One kernel invocation: the tensor handles it fetched or allocated (released before TensorFlow
// is told the op is done), the core operations it enqueued, and what to do with their results.
struct Call {
  using Finish = void (*)(Call&);

  explicit Call(TF_OpKernelContext* c) : ctx(c) {}
  ~Call() { releaseTensors(); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool onGpu() const { return !device.isCpu(); }
  // A tensor of this call's device (not for HostMemory arguments).
  TensorView view(const TF_Tensor* t) const {
    TensorView v = viewOf(t);
    v.device = device;
    return v;
  }

  TF_Tensor* input(int i) {
    Status st;
    TF_Tensor* t = nullptr;
    gTf.GetInput(ctx, i, &t, st.get());
    st.check("reading an input");
    tensors.push_back(t);
    return t;
  }
  TF_Tensor* allocate(int i, int dtype, const std::vector<int64_t>& dims, size_t bytes) {
    Status st;
    TF_Tensor* t = gTf.AllocateOutput(ctx, i, dtype, dims.data(), static_cast<int>(dims.size()),
                                      bytes, st.get());
    st.check("allocating an output");
    tensors.push_back(t);
    return t;
  }
  // Output i over the same buffer as input i when TensorFlow allows it (nobody else reads the
  // input), else a new one: the reduction then runs in place.
  TF_Tensor* forwardOrAllocate(int i, const TF_Tensor* in) {
    Status st;
    std::vector<int64_t> dims = dimsOf(in);
    int forwarded = -1;
    TF_Tensor* t = gTf.ForwardInputOrAllocateOutput(
        ctx, &i, 1, i, dims.data(), static_cast<int>(dims.size()), &forwarded, st.get());
    st.check("allocating an output");
    tensors.push_back(t);
    return t;
  }
  void setOutput(int i, const TF_Tensor* t) {
    Status st;
    gTf.SetOutput(ctx, i, t, st.get());
    st.check("setting an output");
  }
  void releaseTensors() {
    for (TF_Tensor* t : tensors) gTf.DeleteTensor(t);
    tensors.clear();
  }
  // Waits for every enqueued operation, ignoring failures (used before failing the op: the
  // engine may still be writing into this op's buffers).
  void settle() {
    for (auto& work : works) {
      try {
        work->wait();
      } catch (...) {
      }
    }
  }

  TF_OpKernelContext* ctx;
  // Where the kernel's tensors are: the CPU, or (GPU kernels) TensorFlow's GPU of this op. The
  // C API gives a kernel no stream, so GPU tensors carry Device::deviceWideStream(): the backend
  // orders the collective after all work queued on the GPU (docs/gpu.md, TensorFlow).
  Device device;
  std::vector<TF_Tensor*> tensors;
  std::vector<WorkPtr> works;
  Finish finish = nullptr;
};

// Completes a call whose operations have all completed (or waits for them: the synchronous
// way): engine-allocated outputs (`finish`) or the first failure. The op is not done yet: the
// caller releases the call's tensors, then runs TensorFlow's done callback.
void finishCall(Call& call) {
  try {
    for (auto& work : call.works) work->wait();
    if (call.finish) call.finish(call);
  } catch (...) {
    call.settle();
    failWithCurrentException(call.ctx);
  }
}

// How long a kernel runs the engine itself before it returns its thread and lets the op finish
// later: most collectives of a few hundred KiB complete within it, without crossing to another
// thread (the engine's, then the completion thread); longer ones, and ops waiting for peers
// that started other ops first, give the thread back after it (bounded: never a deadlock).
constexpr std::chrono::microseconds kInlineBudget{200};

// Runs the engine on this thread until every operation of `call` completed (true: a failure
// counts as completion) or kInlineBudget passed (false).
bool completeWithinBudget(Call& call) {
  const auto until = std::chrono::steady_clock::now() + kInlineBudget;
  try {
    for (auto& work : call.works) {
      if (work->isCompleted()) continue;
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !work->waitFor(left)) return false;
    }
  } catch (...) {
    return true;  // finishCall() reports it
  }
  return true;
}

// Runs one kernel: `start` fetches inputs, allocates outputs and enqueues. The kernel then runs
// the engine for a short while (kInlineBudget); when its operations are not done by then, and
// the loaded TensorFlow allows it (async_done.h), it returns its thread to TensorFlow and the op
// is finished later, on this library's completion thread, when the engine has completed every
// operation: a graph with more independent Horovod ops than TensorFlow has inter-op threads
// never starves (the ranks may start them in different orders). Otherwise the kernel waits for
// its operations before returning, driving the engine meanwhile.
template <typename Start>
void run(const Config& cfg, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done,
         Start&& start) {
  auto call = std::make_unique<Call>(ctx);
  bool started = false;
  try {
    if (cfg.gpu)
      call->device = Device{DeviceKind::kCuda, gTf.GetDeviceId(ctx), Device::deviceWideStream()};
    start(*call);
    started = true;
  } catch (...) {
    call->settle();
    failWithCurrentException(ctx);
  }
  // A GPU call never runs the engine here: the engine synchronizes the GPU before a GPU
  // collective, which must not hold TensorFlow's thread.
  if (!started || (!call->onGpu() && completeWithinBudget(*call)) || !deferredDoneWorks(gTf)) {
    if (started) finishCall(*call);
    call.reset();  // tensor handles released before TensorFlow is told the op is done
    gTf.RunAsyncOpKernelDoneCallback(done);
    return;
  }
  struct Deferred {
    std::unique_ptr<Call> call;
    DeferredDone done;
    std::atomic<size_t> pending;
  };
  gDeferredOps.fetch_add(1, std::memory_order_relaxed);
  // One count per operation, plus one held until every callback is registered (a callback may
  // run at once, here, when its operation has already completed).
  auto* deferred = new Deferred{std::move(call), DeferredDone(done), {0}};
  deferred->pending.store(deferred->call->works.size() + 1);
  auto arrive = [deferred] {
    if (deferred->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    postCompletion([deferred] {
      finishCall(*deferred->call);
      deferred->call.reset();
      deferred->done.run(gTf);
      delete deferred;
    });
  };
  for (auto& work : deferred->call->works) work->whenComplete(arrive);
  arrive();
}

// Sets output i to an engine-allocated tensor without copying (TensorFlow keeps the engine's
// storage alive through the deallocator's argument).
void setEngineOutput(Call& call, int i, const OwnedTensor& tensor) {
  const TensorView& v = tensor.view;
  size_t bytes = 1;
  for (int64_t d : v.shape) bytes *= static_cast<size_t>(d);
  bytes *= dataTypeSize(v.dtype);
  if (bytes == 0 || v.data == nullptr) {
    call.allocate(i, tfType(v.dtype), v.shape, 0);
    return;
  }
  // TF_NewTensor copies a buffer that is not aligned for Eigen into new host memory: with a GPU
  // buffer that copy would read device memory on the host.
  constexpr uintptr_t kTfAlignment = 64;
  if (!v.device.isCpu() && reinterpret_cast<uintptr_t>(v.data) % kTfAlignment != 0) {
    throw Error("Horovod: an output on GPU " + std::to_string(v.device.index) +
                " is not aligned to " + std::to_string(kTfAlignment) +
                " bytes, which TensorFlow requires of GPU outputs");
  }
  auto* owner = new std::shared_ptr<void>(tensor.storage);
  TF_Tensor* t = gTf.NewTensor(
      tfType(v.dtype), v.shape.data(), static_cast<int>(v.shape.size()), v.data, bytes,
      [](void*, size_t, void* arg) { delete static_cast<std::shared_ptr<void>*>(arg); }, owner);
  call.tensors.push_back(t);
  call.setOutput(i, t);
}

// rank() for a collective: before init, rank() throws InvalidArgument (Python's ValueError, as
// hvd.rank() does), but a collective before init fails as every other collective does (an Error:
// HorovodInternalError), with the same message.
int rankForCollective(const ApiTable& api) {
  try {
    return api.rank();
  } catch (const InvalidArgument& e) {
    if (e.code() == ErrorCode::kNotInitialized) throw Error(e.what(), ErrorCode::kNotInitialized);
    throw;
  }
}

// This rank's (set size, index in the set).
std::pair<int, int> setSizeAndRank(const ApiTable& api, int processSet) {
  if (processSet == 0) return {api.size_(), api.rank()};
  std::vector<int> ranks = api.processSetRanks(processSet);
  auto it = std::find(ranks.begin(), ranks.end(), api.rank());
  if (it == ranks.end()) {
    throw InvalidArgument("Horovod: rank " + std::to_string(api.rank()) +
                          " is not a member of process set " + std::to_string(processSet));
  }
  return {static_cast<int>(ranks.size()), static_cast<int>(it - ranks.begin())};
}

// ---- kernels -----------------------------------------------------------------------------------

void computeAllreduce(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const Config& cfg = *static_cast<Config*>(kernel);
  run(cfg, ctx, done, [&](Call& call) {
    const ApiTable& api = core();
    int n = gTf.NumInputs(ctx);
    std::vector<TensorView> in(n), out(n);
    for (int i = 0; i < n; ++i) {
      TF_Tensor* t = call.input(i);
      in[i] = call.view(t);
      out[i] = call.view(call.forwardOrAllocate(i, t));
    }
    call.works.push_back(cfg.grouped ? api.groupedAllreduceAsync(in, out, cfg.options(cfg.name))
                                     : api.allreduceAsync(in[0], out[0], cfg.options(cfg.name)));
  });
}

void computeAllgather(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const Config& cfg = *static_cast<Config*>(kernel);
  run(cfg, ctx, done, [&](Call& call) {
    const ApiTable& api = core();
    int n = gTf.NumInputs(ctx);
    std::vector<TensorView> in(n);
    for (int i = 0; i < n; ++i) in[i] = call.view(call.input(i));
    call.works.push_back(cfg.grouped ? api.groupedAllgatherAsync(in, cfg.options(cfg.name))
                                     : api.allgatherAsync(in[0], cfg.options(cfg.name)));
    call.finish = [](Call& c) {
      const auto& outputs = c.works[0]->outputs();
      for (size_t i = 0; i < outputs.size(); ++i)
        setEngineOutput(c, static_cast<int>(i), outputs[i]);
    };
  });
}

// Inputs broadcast together, one core operation each (names: one per line of hvd_name). The root
// only reads its buffers, so its outputs are its inputs.
void computeBroadcast(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const Config& cfg = *static_cast<Config*>(kernel);
  run(cfg, ctx, done, [&](Call& call) {
    const ApiTable& api = core();
    int n = gTf.NumInputs(ctx);
    std::vector<std::string> names;
    size_t start = 0;
    while (names.size() < static_cast<size_t>(n)) {
      size_t end = cfg.name.find('\n', start);
      names.push_back(cfg.name.substr(start, end == std::string::npos ? end : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
    if (names.size() != static_cast<size_t>(n)) {
      throw InvalidArgument("Horovod: HorovodBroadcast got " + std::to_string(n) + " tensors but " +
                            std::to_string(names.size()) + " names");
    }
    bool isRoot = rankForCollective(api) == cfg.root;
    for (int i = 0; i < n; ++i) {
      TF_Tensor* t = call.input(i);
      TF_Tensor* out = t;
      if (isRoot) {
        call.setOutput(i, t);
      } else {
        out = call.allocate(i, gTf.TensorType(t), dimsOf(t), gTf.TensorByteSize(t));
      }
      call.works.push_back(api.broadcastAsync(call.view(out), cfg.options(names[i])));
    }
  });
}

void computeAlltoall(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const Config& cfg = *static_cast<Config*>(kernel);
  run(cfg, ctx, done, [&](Call& call) {
    const ApiTable& api = core();
    TensorView in = call.view(call.input(0));
    const TF_Tensor* splits = call.input(1);  // host memory on GPUs too (HostMemory("splits"))
    Options options = cfg.options(cfg.name);
    const auto* s = static_cast<const int32_t*>(gTf.TensorData(splits));
    options.splits.assign(s, s + gTf.TensorByteSize(splits) / sizeof(int32_t));
    call.works.push_back(api.alltoallAsync(in, options));
    call.finish = [](Call& c) {
      setEngineOutput(c, 0, c.works[0]->outputs()[0]);
      const auto& received = c.works[0]->receivedSplits();
      TF_Tensor* t = c.allocate(1, kTfInt32, {static_cast<int64_t>(received.size())},
                                received.size() * sizeof(int32_t));
      if (!received.empty()) {
        std::memcpy(gTf.TensorData(t), received.data(), received.size() * sizeof(int32_t));
      }
    };
  });
}

void computeReducescatter(void* kernel, TF_OpKernelContext* ctx,
                          TF_AsyncOpKernelDoneCallback* done) {
  const Config& cfg = *static_cast<Config*>(kernel);
  run(cfg, ctx, done, [&](Call& call) {
    const ApiTable& api = core();
    auto [setSize, setRank] = setSizeAndRank(api, cfg.processSet);
    int n = gTf.NumInputs(ctx);
    std::vector<TensorView> in(n), out(n);
    for (int i = 0; i < n; ++i) {
      TF_Tensor* t = call.input(i);
      in[i] = call.view(t);
      if (in[i].shape.empty())
        throw InvalidArgument("Reducescatter does not support scalar inputs");
      std::vector<int64_t> dims = in[i].shape;
      int64_t d = dims[0];
      dims[0] = d / setSize + (setRank < d % setSize ? 1 : 0);
      size_t bytes = dataTypeSize(in[i].dtype);
      for (int64_t x : dims) bytes *= static_cast<size_t>(x);
      out[i] = call.view(call.allocate(i, gTf.TensorType(t), dims, bytes));
    }
    call.works.push_back(cfg.grouped
                             ? api.groupedReducescatterAsync(in, out, cfg.options(cfg.name))
                             : api.reducescatterAsync(in[0], out[0], cfg.options(cfg.name)));
  });
}

void computeJoin(void*, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  static const Config kCpu;
  run(kCpu, ctx, done, [&](Call& call) {
    call.works.push_back(core().joinAsync());
    call.finish = [](Call& c) {
      TF_Tensor* t = c.allocate(0, kTfInt32, {}, sizeof(int32_t));
      *static_cast<int32_t*>(gTf.TensorData(t)) = c.works[0]->joinResult();
    };
  });
}

// Topology as a graph-time int32 scalar: size, local_size, rank, local_rank, process_set_size,
// process_set_rank, process_set_included (1, 0, or -1 for an unknown set).
void computeTopology(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const Config& cfg = *static_cast<Config*>(kernel);
  run(cfg, ctx, done, [&](Call& call) {
    const ApiTable& api = core();
    int value = 0;
    if (cfg.what == "size") {
      value = api.size_();
    } else if (cfg.what == "local_size") {
      value = api.localSize();
    } else if (cfg.what == "rank") {
      value = api.rank();
    } else if (cfg.what == "local_rank") {
      value = api.localRank();
    } else if (cfg.what == "process_set_size") {
      value = setSizeAndRank(api, cfg.processSet).first;
    } else if (cfg.what == "process_set_rank") {
      value = setSizeAndRank(api, cfg.processSet).second;
    } else if (cfg.what == "process_set_included") {
      try {
        std::vector<int> ranks = cfg.processSet == 0 ? std::vector<int>{api.rank()}
                                                     : api.processSetRanks(cfg.processSet);
        value = std::find(ranks.begin(), ranks.end(), api.rank()) != ranks.end() ? 1 : 0;
      } catch (const std::exception&) {
        value = -1;
      }
    } else {
      throw InvalidArgument("Horovod: unknown topology query '" + cfg.what + "'");
    }
    TF_Tensor* t = call.allocate(0, kTfInt32, {}, sizeof(int32_t));
    *static_cast<int32_t*>(gTf.TensorData(t)) = value;
  });
}

// ---- registration ------------------------------------------------------------------------------

void sameShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  int64_t n = gTf.ShapeInferenceContextNumInputs(ctx);
  TF_ShapeHandle* shape = gTf.NewShapeHandle();
  for (int i = 0; i < n && gTf.GetCode(status) == kTfOk; ++i) {
    gTf.ShapeInferenceContextGetInput(ctx, i, shape, status);
    if (gTf.GetCode(status) == kTfOk) gTf.ShapeInferenceContextSetOutput(ctx, i, shape, status);
  }
  gTf.DeleteShapeHandle(shape);
}

// Output shapes known only when the op runs (horovod.tensorflow sets what it knows statically).
void unknownShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  gTf.ShapeInferenceContextSetUnknownShape(ctx, status);
}

constexpr const char* kReduceTypes = "{uint8, int8, int32, int64, half, bfloat16, float, double}";
constexpr const char* kMoveTypes =
    "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}";
constexpr const char* kScatterTypes = "{int32, int64, half, bfloat16, float, double}";

struct OpSpec {
  const char* name;
  std::vector<std::string> attrs;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  void (*shapes)(TF_ShapeInferenceContext*, TF_Status*);
  void* (*create)(TF_OpKernelConstruction*);
  void (*compute)(void*, TF_OpKernelContext*, TF_AsyncOpKernelDoneCallback*);
  // The GPU kernel's constructor (nullptr: CPU only) and its arguments in host memory.
  void* (*createGpu)(TF_OpKernelConstruction*) = nullptr;
  std::vector<const char*> hostMemory = {};
};

std::string listOf(const char* types) { return std::string("T: list(") + types + ") >= 1"; }

std::vector<OpSpec> opSpecs() {
  const std::vector<std::string> reduceAttrs = {
      "hvd_name: string", "reduce_op: int", "prescale: float", "postscale: float",
      "process_set: int", "one_off: bool",  "grouped: bool"};
  constexpr unsigned kReduceAll = kName | kReduce | kProcessSet | kOneOff | kGrouped;
  std::vector<OpSpec> specs;
  {
    auto attrs = reduceAttrs;
    attrs.push_back(listOf(kReduceTypes));
    specs.push_back({"HorovodAllreduce",
                     attrs,
                     {"tensors: T"},
                     {"outputs: T"},
                     sameShapes,
                     createKernel<kReduceAll>,
                     computeAllreduce,
                     createKernel<kReduceAll, true>});
  }
  specs.push_back({"HorovodAllgather",
                   {listOf(kMoveTypes), "hvd_name: string", "process_set: int", "one_off: bool",
                    "grouped: bool"},
                   {"tensors: T"},
                   {"outputs: T"},
                   unknownShapes,
                   createKernel<kName | kProcessSet | kOneOff | kGrouped>,
                   computeAllgather,
                   createKernel<kName | kProcessSet | kOneOff | kGrouped, true>});
  specs.push_back({"HorovodBroadcast",
                   {listOf(kMoveTypes), "hvd_name: string", "root_rank: int", "process_set: int"},
                   {"tensors: T"},
                   {"outputs: T"},
                   sameShapes,
                   createKernel<kName | kRoot | kProcessSet>,
                   computeBroadcast,
                   createKernel<kName | kRoot | kProcessSet, true>});
  specs.push_back(
      {"HorovodAlltoall",
       {std::string("T: ") + kMoveTypes, "hvd_name: string", "process_set: int", "one_off: bool"},
       {"tensor: T", "splits: int32"},
       {"output: T", "received_splits: int32"},
       unknownShapes,
       createKernel<kName | kProcessSet | kOneOff>,
       computeAlltoall,
       createKernel<kName | kProcessSet | kOneOff, true>,
       {"splits", "received_splits"}});
  {
    auto attrs = reduceAttrs;
    attrs.push_back(listOf(kScatterTypes));
    specs.push_back({"HorovodReducescatter",
                     attrs,
                     {"tensors: T"},
                     {"outputs: T"},
                     unknownShapes,
                     createKernel<kReduceAll>,
                     computeReducescatter,
                     createKernel<kReduceAll, true>});
  }
  specs.push_back({"HorovodJoin",
                   {},
                   {},
                   {"last_joined_rank: int32"},
                   unknownShapes,
                   createKernel<0>,
                   computeJoin});
  specs.push_back({"HorovodTopology",
                   {"what: string", "process_set: int"},
                   {},
                   {"value: int32"},
                   unknownShapes,
                   createKernel<kWhat | kProcessSet>,
                   computeTopology});
  return specs;
}

bool registerAll(std::string& error) {
  for (const OpSpec& spec : opSpecs()) {
    TF_OpDefinitionBuilder* op = gTf.NewOpDefinitionBuilder(spec.name);
    for (const auto& a : spec.attrs) gTf.OpDefinitionBuilderAddAttr(op, a.c_str());
    for (const auto& i : spec.inputs) gTf.OpDefinitionBuilderAddInput(op, i.c_str());
    for (const auto& o : spec.outputs) gTf.OpDefinitionBuilderAddOutput(op, o.c_str());
    gTf.OpDefinitionBuilderSetIsStateful(op, true);
    gTf.OpDefinitionBuilderSetShapeInferenceFunction(op, spec.shapes);
    Status st;
    gTf.RegisterOpDefinition(op, st.get());  // takes ownership of `op`
    if (!st.ok()) {
      error = std::string("registering op ") + spec.name + ": " + gTf.Message(st.get());
      return false;
    }
    TF_KernelBuilder* kernel =
        gTf.NewAsyncKernelBuilder(spec.name, "CPU", spec.create, spec.compute, destroyKernel);
    gTf.RegisterKernelBuilder(spec.name, kernel, st.get());  // takes ownership of `kernel`
    if (!st.ok()) {
      error =
          std::string("registering the CPU kernel of ") + spec.name + ": " + gTf.Message(st.get());
      return false;
    }
  }
  return true;
}

// The GPU kernels of the collectives: registered by horovod.tensorflow once the core it binds
// has the CUDA backend (a build without it keeps TensorFlow placing the ops on the CPU, with
// TensorFlow's copies around them).
bool registerGpuKernels(std::string& error) {
  for (const OpSpec& spec : opSpecs()) {
    if (spec.createGpu == nullptr) continue;
    TF_KernelBuilder* kernel =
        gTf.NewAsyncKernelBuilder(spec.name, "GPU", spec.createGpu, spec.compute, destroyKernel);
    for (const char* arg : spec.hostMemory) gTf.KernelBuilderHostMemory(kernel, arg);
    Status st;
    gTf.RegisterKernelBuilder(spec.name, kernel, st.get());  // takes ownership of `kernel`
    if (!st.ok()) {
      error =
          std::string("registering the GPU kernel of ") + spec.name + ": " + gTf.Message(st.get());
      return false;
    }
  }
  return true;
}

// Runs when TensorFlow loads the library (tf.load_op_library): the ops must be registered then.
[[maybe_unused]] const bool gRegistered = [] {
  std::string error;
  if (!load(gTf, error) || !registerAll(error)) {
    gLoadError = error.empty() ? "unknown failure" : error;
    return false;
  }
  return true;
}();

}  // namespace
}  // namespace hvd::tf

// Why loading failed (a missing C API symbol, a registration error), or "" when the ops are
// registered.
extern "C" __attribute__((visibility("default"))) const char* horovod_tf_load_error() {
  return hvd::tf::gLoadError.c_str();
}

// Whether kernels return their thread to TensorFlow before their collectives complete (1) or wait
// for them (0, the fallback; `*why` then says why). Runs the check of async_done.h on first call.
extern "C" __attribute__((visibility("default"))) int horovod_tf_deferred_done(const char** why) {
  static std::string reason;
  bool ok = hvd::tf::deferredDoneWorks(hvd::tf::gTf, &reason);
  if (why != nullptr) *why = reason.c_str();
  return ok ? 1 : 0;
}

// Ops whose kernel returned before they completed, since the library loaded (tests).
extern "C" __attribute__((visibility("default"))) uint64_t horovod_tf_deferred_ops() {
  return hvd::tf::gDeferredOps.load(std::memory_order_relaxed);
}

// Registers the collectives' GPU kernels (once; later calls return the first answer): "" or why
// they could not be registered. Called after horovod_tf_bind when the core has a CUDA backend.
extern "C" __attribute__((visibility("default"))) const char* horovod_tf_register_gpu_kernels() {
  static const std::string error = [] {
    std::string why;
    if (!hvd::tf::gLoadError.empty()) return hvd::tf::gLoadError;
    hvd::tf::registerGpuKernels(why);
    return why;
  }();
  return error.c_str();
}

// Binds the kernels to the core whose hvd::ApiTable is at `table`; returns "" or why not.
extern "C" __attribute__((visibility("default"))) const char* horovod_tf_bind(const void* table) {
  const auto* api = static_cast<const hvd::ApiTable*>(table);
  if (api == nullptr || api->version != hvd::ApiTable::kVersion ||
      api->size != sizeof(hvd::ApiTable)) {
    return "the Horovod core and its TensorFlow kernel library come from different builds; "
           "reinstall horovod";
  }
  hvd::tf::gCore.store(api, std::memory_order_release);
  return "";
}
