// XLA FFI handlers for horovod.jax's collectives inside jax.jit (the library
// horovod/jax/_horovod_jax_ffi.so, loaded by horovod.jax with ctypes and registered with
// jax.ffi.register_ffi_target(..., platform="cpu")).
//
// Nothing is compiled against jaxlib: the handlers speak XLA's FFI C ABI as declared in
// xla_ffi_abi.inc, and drive the engine of horovod._core through the table _core hands them
// (horovod_jax_bind), so the library links no core code.
//
// Contract of every handler (one per collective; a custom call carries one whole group):
// - called with the metadata extension (at registration), it reports the FFI API version it was
//   declared against (XLA refuses it if incompatible) and returns;
// - called to execute, it enqueues its collective, waits for it, and returns null on success;
//   any failure (a Horovod error, a bad attribute, a shape the other ranks disagree with) comes
//   back as an XLA error carrying Horovod's message, never as a hang or an exception.
// Attributes (set by horovod/jax/_xla.py): name (string), prefix (string), process_set (int64),
// and per collective op (int64), prescale / postscale (float64), root (int64). An unnamed call
// (name "") is named here "<prefix>jax.xla.noname.<n>", n counting this process's unnamed
// handler calls in execution order (restarted at every init and shutdown): like Horovod's other
// unnamed calls, they match across ranks when every rank runs the same sequence of them. That
// relies on XLA running a step's side-effecting custom calls in the same order on every rank
// (the same program compiles to the same schedule); tests/python/test_jax.py checks it with
// unnamed calls of different shapes in lax.scan and lax.while_loop at 2 and 3 ranks.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "horovod/api_table.h"
#include "horovod/errors.h"
#include "horovod/operation.h"
#include "xla_ffi.h"

namespace hvd::jax {
namespace {

using namespace hvd::jax::xla;

std::atomic<const ApiTable*> gCore{nullptr};
std::atomic<uint64_t> gUnnamed{0};  // unnamed calls so far (restarted by horovod_jax_reset_names)

// Written into the probe's output, so that Python can tell a probe that ran from stale memory.
constexpr int32_t kProbeMagic = 0x68766478;  // "hvdx"

constexpr size_t kCallFrameSize = HVD_XLA_STRUCT_SIZE(XLA_FFI_CallFrame, attrs);
constexpr size_t kApiPrefixSize = HVD_XLA_STRUCT_SIZE(XLA_FFI_Api_Prefix, error_create);

// A failure inside a handler, turned into an XLA error at the handler's boundary.
struct HandlerError : std::runtime_error {
  HandlerError(XLA_FFI_Error_Code c, const std::string& message)
      : std::runtime_error(message), code(c) {}
  XLA_FFI_Error_Code code;
};

XLA_FFI_Error_Code xlaCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kNotInitialized: return XLA_FFI_Error_Code_INVALID_ARGUMENT;
    case ErrorCode::kMismatch: return XLA_FFI_Error_Code_FAILED_PRECONDITION;
    case ErrorCode::kTimeout: return XLA_FFI_Error_Code_DEADLINE_EXCEEDED;
    case ErrorCode::kPeerLost:
    case ErrorCode::kStore:
    case ErrorCode::kRemovedFromJob: return XLA_FFI_Error_Code_UNAVAILABLE;
    case ErrorCode::kAborted: return XLA_FFI_Error_Code_ABORTED;
    default: return XLA_FFI_Error_Code_INTERNAL;
  }
}

XLA_FFI_Error* makeError(const XLA_FFI_Api* api, XLA_FFI_Error_Code code,
                         const std::string& message) {
  const auto* table = reinterpret_cast<const XLA_FFI_Api_Prefix*>(api);
  XLA_FFI_Error_Create_Args args{};
  args.struct_size = HVD_XLA_STRUCT_SIZE(XLA_FFI_Error_Create_Args, errc);
  args.message = message.c_str();
  args.errc = code;
  return table->error_create(&args);
}

// Answers XLA's registration-time question: which FFI API version this handler speaks.
XLA_FFI_Error* describe(XLA_FFI_Metadata_Extension* extension) {
  XLA_FFI_Metadata* metadata = extension->metadata;
  if (metadata == nullptr ||
      metadata->struct_size < HVD_XLA_STRUCT_SIZE(XLA_FFI_Metadata, traits)) {
    return nullptr;  // nothing we can fill in; XLA then sees no version and refuses the handler
  }
  metadata->api_version.struct_size = HVD_XLA_STRUCT_SIZE(XLA_FFI_Api_Version, minor_version);
  metadata->api_version.extension_start = nullptr;
  metadata->api_version.major_version = kXlaFfiApiMajor;
  metadata->api_version.minor_version = kXlaFfiApiMinor;
  metadata->traits = 0;
  return nullptr;
}

// The registration-time call: XLA asks for the handler's metadata instead of running it.
XLA_FFI_Metadata_Extension* metadataRequest(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start == nullptr ||
      frame->extension_start->type != XLA_FFI_Extension_Metadata) {
    return nullptr;
  }
  return reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start);
}

// ---- reading the call frame ----------------------------------------------------------------------

class Call {
 public:
  Call(const char* target, XLA_FFI_CallFrame* frame) : target_(target), frame_(frame) {}

  [[noreturn]] void fail(XLA_FFI_Error_Code code, const std::string& what) const {
    throw HandlerError(code, std::string("horovod.jax (XLA FFI target ") + target_ + "): " + what);
  }

  const void* attr(std::string_view name, XLA_FFI_AttrType type) const {
    const XLA_FFI_Attrs& attrs = frame_->attrs;
    for (int64_t i = 0; i < attrs.size; ++i) {
      const XLA_FFI_ByteSpan* n = attrs.names[i];
      if (std::string_view(n->ptr, n->len) != name) continue;
      if (attrs.types[i] != type)
        fail(XLA_FFI_Error_Code_INVALID_ARGUMENT,
             "attribute '" + std::string(name) + "' has the wrong kind");
      return attrs.attrs[i];
    }
    fail(XLA_FFI_Error_Code_INVALID_ARGUMENT, "missing attribute '" + std::string(name) + "'");
  }

  std::string str(std::string_view name) const {
    const auto* span = static_cast<const XLA_FFI_ByteSpan*>(attr(name, XLA_FFI_AttrType_STRING));
    return std::string(span->ptr, span->len);
  }

  int64_t i64(std::string_view name) const {
    const auto* s = static_cast<const XLA_FFI_Scalar*>(attr(name, XLA_FFI_AttrType_SCALAR));
    if (s->dtype == XLA_FFI_DataType_S64) return *static_cast<const int64_t*>(s->value);
    if (s->dtype == XLA_FFI_DataType_S32) return *static_cast<const int32_t*>(s->value);
    fail(XLA_FFI_Error_Code_INVALID_ARGUMENT,
         "attribute '" + std::string(name) + "' is not an integer");
  }

  double f64(std::string_view name) const {
    const auto* s = static_cast<const XLA_FFI_Scalar*>(attr(name, XLA_FFI_AttrType_SCALAR));
    if (s->dtype == XLA_FFI_DataType_F64) return *static_cast<const double*>(s->value);
    if (s->dtype == XLA_FFI_DataType_F32) return *static_cast<const float*>(s->value);
    fail(XLA_FFI_Error_Code_INVALID_ARGUMENT,
         "attribute '" + std::string(name) + "' is not a float");
  }

  // The buffer operands (tokens, if any, are skipped) and results, as Horovod tensors.
  std::vector<TensorView> args() const {
    return views(frame_->args.size, reinterpret_cast<const int*>(frame_->args.types),
                 frame_->args.args);
  }
  std::vector<TensorView> rets() const {
    return views(frame_->rets.size, reinterpret_cast<const int*>(frame_->rets.types),
                 frame_->rets.rets);
  }

  // The core's settings common to every collective: name, process set.
  Options options() const {
    Options o;
    o.processSet = static_cast<int>(i64("process_set"));
    o.name = str("name");
    if (o.name.empty()) {
      o.name = str("prefix") + "jax.xla.noname." + std::to_string(gUnnamed.fetch_add(1) + 1);
      o.oneOffName = true;
    }
    return o;
  }

  // options() plus a reduction's op, prescale and postscale.
  Options reduceOptions() const {
    Options o = options();
    o.op = static_cast<ReduceOp>(i64("op"));
    o.prescale = f64("prescale");
    o.postscale = f64("postscale");
    return o;
  }

 private:
  std::vector<TensorView> views(int64_t n, const int* types, void** items) const {
    std::vector<TensorView> out;
    for (int64_t i = 0; i < n; ++i) {
      if (types[i] != XLA_FFI_ArgType_BUFFER)
        fail(XLA_FFI_Error_Code_INVALID_ARGUMENT, "an operand is not a buffer");
      const auto* b = static_cast<const XLA_FFI_Buffer*>(items[i]);
      if (b->dtype == XLA_FFI_DataType_TOKEN) continue;
      TensorView v;
      v.data = b->data;
      v.dtype = dataType(b->dtype);
      v.shape.assign(b->dims, b->dims + b->rank);
      out.push_back(std::move(v));
    }
    return out;
  }

  DataType dataType(XLA_FFI_DataType t) const {
    switch (t) {
      case XLA_FFI_DataType_PRED: return DataType::kBool;
      case XLA_FFI_DataType_S8: return DataType::kInt8;
      case XLA_FFI_DataType_S16: return DataType::kInt16;
      case XLA_FFI_DataType_S32: return DataType::kInt32;
      case XLA_FFI_DataType_S64: return DataType::kInt64;
      case XLA_FFI_DataType_U8: return DataType::kUInt8;
      case XLA_FFI_DataType_U16: return DataType::kUInt16;
      case XLA_FFI_DataType_F16: return DataType::kFloat16;
      case XLA_FFI_DataType_F32: return DataType::kFloat32;
      case XLA_FFI_DataType_F64: return DataType::kFloat64;
      case XLA_FFI_DataType_BF16: return DataType::kBFloat16;
      default:
        fail(XLA_FFI_Error_Code_INVALID_ARGUMENT,
             "XLA element type " + std::to_string(t) + " is not supported");
    }
  }

  const char* target_;
  XLA_FFI_CallFrame* frame_;
};

// A view's size in bytes (TensorView::bytes() lives in the core, which this library does not link).
size_t byteCount(const TensorView& v) {
  size_t n = dataTypeSize(v.dtype);
  for (int64_t d : v.shape) n *= static_cast<size_t>(d);
  return n;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Copies engine-allocated outputs into XLA's result buffers, whose shapes were fixed when
// tracing: the other ranks must have sent what that shape assumed.
void copyOutputs(const Call& call, const std::vector<OwnedTensor>& outputs,
                 const std::vector<TensorView>& rets, const char* what) {
  if (outputs.size() != rets.size())
    call.fail(XLA_FFI_Error_Code_INTERNAL, "the core returned a different number of outputs");
  for (size_t i = 0; i < rets.size(); ++i) {
    const TensorView& got = outputs[i].view;
    if (got.shape != rets[i].shape) {
      call.fail(
          XLA_FFI_Error_Code_FAILED_PRECONDITION,
          std::string(what) +
              " inside jax.jit needs the same first dimension on every rank; gathered shape " +
              shapeText(got.shape) + " where " + shapeText(rets[i].shape) + " was traced.");
    }
    if (size_t n = byteCount(got)) std::memcpy(rets[i].data, got.data, n);
  }
}

const ApiTable& core(const Call& call) {
  const ApiTable* table = gCore.load(std::memory_order_acquire);
  if (table == nullptr)
    call.fail(XLA_FFI_Error_Code_FAILED_PRECONDITION,
              "the handlers are not bound to the Horovod core");
  return *table;
}

// ---- the collectives -----------------------------------------------------------------------------

void allreduce(const Call& call) {
  const ApiTable& api = core(call);
  Options o = call.reduceOptions();
  std::vector<TensorView> in = call.args(), out = call.rets();
  WorkPtr work =
      in.size() == 1 ? api.allreduceAsync(in[0], out[0], o) : api.groupedAllreduceAsync(in, out, o);
  work->wait();
}

void allgather(const Call& call) {
  const ApiTable& api = core(call);
  Options o = call.options();
  std::vector<TensorView> in = call.args(), out = call.rets();
  WorkPtr work = in.size() == 1 ? api.allgatherAsync(in[0], o) : api.groupedAllgatherAsync(in, o);
  work->wait();
  copyOutputs(call, work->outputs(), out, "allgather");
}

void broadcast(const Call& call) {
  const ApiTable& api = core(call);
  Options o = call.options();
  o.root = static_cast<int>(call.i64("root"));
  std::vector<TensorView> in = call.args(), out = call.rets();
  if (in.size() != 1 || out.size() != 1)
    call.fail(XLA_FFI_Error_Code_INVALID_ARGUMENT, "broadcast takes one array");
  if (size_t n = byteCount(out[0]); n != 0 && out[0].data != in[0].data)
    std::memcpy(out[0].data, in[0].data, n);
  api.broadcastAsync(out[0], o)->wait();
}

void reducescatter(const Call& call) {
  const ApiTable& api = core(call);
  Options o = call.reduceOptions();
  std::vector<TensorView> in = call.args(), out = call.rets();
  WorkPtr work = in.size() == 1 ? api.reducescatterAsync(in[0], out[0], o)
                                : api.groupedReducescatterAsync(in, out, o);
  work->wait();
}

void alltoall(const Call& call) {
  const ApiTable& api = core(call);
  Options o =
      call.options();  // equal splits: the only form whose output shape is known when tracing
  std::vector<TensorView> in = call.args(), out = call.rets();
  if (in.size() != 1 || out.size() != 1)
    call.fail(XLA_FFI_Error_Code_INVALID_ARGUMENT, "alltoall takes one array");
  WorkPtr work = api.alltoallAsync(in[0], o);
  work->wait();
  copyOutputs(call, work->outputs(), out, "alltoall");
}

// Reports what the running XLA hands its handlers: {magic, FFI major, FFI minor, size of the
// function table}, into an int32[4] result (horovod_jax_ffi_check judges them).
XLA_FFI_Error* probe(XLA_FFI_CallFrame* frame) {
  if (XLA_FFI_Metadata_Extension* metadata = metadataRequest(frame)) return describe(metadata);
  if (frame->struct_size < kCallFrameSize || frame->rets.size != 1) return nullptr;
  const auto* out = static_cast<const XLA_FFI_Buffer*>(frame->rets.rets[0]);
  if (out->dtype != XLA_FFI_DataType_S32 || out->rank != 1 || out->dims[0] != 4) return nullptr;
  const auto* api = reinterpret_cast<const XLA_FFI_Api_Prefix*>(frame->api);
  auto* values = static_cast<int32_t*>(out->data);
  values[0] = kProbeMagic;
  values[1] = api->api_version.major_version;
  values[2] = api->api_version.minor_version;
  values[3] = static_cast<int32_t>(api->struct_size);
  return nullptr;
}

// The boundary every collective handler goes through (see the contract at the top).
template <void (*Body)(const Call&)>
XLA_FFI_Error* handle(const char* target, XLA_FFI_CallFrame* frame) {
  if (XLA_FFI_Metadata_Extension* metadata = metadataRequest(frame)) return describe(metadata);
  const auto* api = reinterpret_cast<const XLA_FFI_Api_Prefix*>(frame->api);
  if (frame->struct_size < kCallFrameSize || api == nullptr || api->struct_size < kApiPrefixSize ||
      api->api_version.major_version != kXlaFfiApiMajor) {
    // XLA accepted a handler whose ABI it does not speak (registration checks make this
    // unreachable): there is no way to hand back an error, and returning would fake a result.
    std::fprintf(stderr,
                 "horovod.jax: XLA called %s through an FFI ABI it does not declare; aborting\n",
                 target);
    std::abort();
  }
  try {
    Call call(target, frame);
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return nullptr;  // nothing to prepare
    Body(call);
    return nullptr;
  } catch (const HandlerError& e) {
    return makeError(frame->api, e.code, e.what());
  } catch (const Error& e) {
    return makeError(frame->api, xlaCode(e.code()), e.what());
  } catch (const std::exception& e) {
    return makeError(frame->api, XLA_FFI_Error_Code_INTERNAL, e.what());
  } catch (...) {
    return makeError(frame->api, XLA_FFI_Error_Code_INTERNAL,
                     std::string("horovod.jax (") + target + "): unknown failure");
  }
}

}  // namespace
}  // namespace hvd::jax

using hvd::jax::xla::XLA_FFI_CallFrame;
using hvd::jax::xla::XLA_FFI_Error;

#define HVD_JAX_EXPORT extern "C" __attribute__((visibility("default")))

// Binds the handlers to horovod._core's engine; "" on success, else why not.
HVD_JAX_EXPORT const char* horovod_jax_bind(const void* table) {
  const auto* api = static_cast<const hvd::ApiTable*>(table);
  if (api == nullptr || api->version != hvd::ApiTable::kVersion ||
      api->size != sizeof(hvd::ApiTable)) {
    return "the Horovod core and its JAX FFI library come from different builds; reinstall horovod";
  }
  hvd::jax::gCore.store(api, std::memory_order_release);
  return "";
}

// Restarts the numbering of unnamed calls (horovod.jax calls it at every init and shutdown, so
// that ranks agree on the names).
HVD_JAX_EXPORT void horovod_jax_reset_names() { hvd::jax::gUnnamed.store(0); }

// The FFI API version the handlers declare, as "major.minor".
HVD_JAX_EXPORT const char* horovod_jax_ffi_api_version() {
  static const std::string version = std::to_string(hvd::jax::xla::kXlaFfiApiMajor) + "." +
                                     std::to_string(hvd::jax::xla::kXlaFfiApiMinor);
  return version.c_str();
}

// Judges what the probe reported (its int32[4] result): "" when the handlers can run on this
// XLA, else why not.
HVD_JAX_EXPORT const char* horovod_jax_ffi_check(const int32_t* probed) {
  using namespace hvd::jax::xla;
  static thread_local std::string why;
  if (probed[0] != hvd::jax::kProbeMagic) {
    why = "the probe handler did not run (XLA passed a call frame of an unexpected layout)";
  } else if (probed[1] != kXlaFfiApiMajor || probed[2] < kXlaFfiApiMinor) {
    why = "XLA's FFI API is " + std::to_string(probed[1]) + "." + std::to_string(probed[2]) +
          "; the handlers need " + std::to_string(kXlaFfiApiMajor) + "." +
          std::to_string(kXlaFfiApiMinor) + " or a newer minor version";
  } else if (static_cast<size_t>(probed[3]) < hvd::jax::kApiPrefixSize) {
    why = "XLA's FFI function table is too short (" + std::to_string(probed[3]) + " bytes)";
  } else {
    why.clear();
  }
  return why.c_str();
}

HVD_JAX_EXPORT XLA_FFI_Error* horovod_jax_probe(XLA_FFI_CallFrame* f) { return hvd::jax::probe(f); }
HVD_JAX_EXPORT XLA_FFI_Error* horovod_jax_allreduce(XLA_FFI_CallFrame* f) {
  return hvd::jax::handle<hvd::jax::allreduce>("horovod_jax_allreduce", f);
}
HVD_JAX_EXPORT XLA_FFI_Error* horovod_jax_allgather(XLA_FFI_CallFrame* f) {
  return hvd::jax::handle<hvd::jax::allgather>("horovod_jax_allgather", f);
}
HVD_JAX_EXPORT XLA_FFI_Error* horovod_jax_broadcast(XLA_FFI_CallFrame* f) {
  return hvd::jax::handle<hvd::jax::broadcast>("horovod_jax_broadcast", f);
}
HVD_JAX_EXPORT XLA_FFI_Error* horovod_jax_reducescatter(XLA_FFI_CallFrame* f) {
  return hvd::jax::handle<hvd::jax::reducescatter>("horovod_jax_reducescatter", f);
}
HVD_JAX_EXPORT XLA_FFI_Error* horovod_jax_alltoall(XLA_FFI_CallFrame* f) {
  return hvd::jax::handle<hvd::jax::alltoall>("horovod_jax_alltoall", f);
}
