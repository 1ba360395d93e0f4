// The extern "C" surface: every entry point catches everything and turns it into a status code
// plus a thread-local message. This is the only place in the core that uses status codes.
#include "horovod/c_api.h"

#include <chrono>
#include <exception>
#include <string>

#include "horovod/horovod.h"

struct hvd_handle_s {
  hvd::WorkPtr work;
};

namespace {

thread_local std::string tLastError;

hvd_status fail(hvd_status status, const char* message) {
  tLastError = message;
  return status;
}

// Maps the current exception to a status (called inside a catch block).
hvd_status fromCurrentException() {
  try {
    throw;
  } catch (const hvd::InvalidArgument& e) {
    return fail(HVD_ERR_INVALID_ARGUMENT, e.what());
  } catch (const hvd::MismatchError& e) {
    return fail(HVD_ERR_MISMATCH, e.what());
  } catch (const hvd::Timeout& e) {
    return fail(HVD_ERR_TIMEOUT, e.what());
  } catch (const hvd::PeerLost& e) {
    return fail(HVD_ERR_PEER_LOST, e.what());
  } catch (const hvd::StoreError& e) {
    return fail(HVD_ERR_STORE, e.what());
  } catch (const hvd::Aborted& e) {
    return fail(HVD_ERR_ABORTED, e.what());
  } catch (const std::exception& e) {
    return fail(HVD_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(HVD_ERR_INTERNAL, "unknown error");
  }
}

template <typename F>
hvd_status guarded(F&& fn) {
  try {
    fn();
    return HVD_OK;
  } catch (...) {
    return fromCurrentException();
  }
}

hvd::TensorView flat(const void* data, int64_t count, int dtype) {
  if (dtype < 0 || dtype >= hvd::kNumDataTypes) throw hvd::InvalidArgument("unknown dtype " + std::to_string(dtype));
  if (count < 0) throw hvd::InvalidArgument("negative element count " + std::to_string(count));
  hvd::TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = static_cast<hvd::DataType>(dtype);
  v.shape = {count};
  return v;
}

hvd::Options options(const char* name, int processSet) {
  hvd::Options o;
  if (name != nullptr) o.name = name;
  o.processSet = processSet;
  return o;
}

void returnHandle(hvd::WorkPtr work, hvd_handle* handle) {
  if (handle == nullptr) throw hvd::InvalidArgument("handle pointer is NULL");
  *handle = new hvd_handle_s{std::move(work)};
}

template <typename Getter>
hvd_status topology(int* out, Getter getter) {
  return guarded([&] {
    if (out == nullptr) throw hvd::InvalidArgument("output pointer is NULL");
    *out = getter();
  });
}

}  // namespace

extern "C" {

const char* hvd_last_error(void) { return tLastError.c_str(); }

hvd_status hvd_init(void) {
  return guarded([] { hvd::init(); });
}
hvd_status hvd_shutdown(void) {
  return guarded([] { hvd::shutdown(); });
}
int hvd_is_initialized(void) {
  try {
    return hvd::isInitialized() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
hvd_status hvd_rank(int* out) {
  return topology(out, [] { return hvd::rank(); });
}
hvd_status hvd_size(int* out) {
  return topology(out, [] { return hvd::size(); });
}
hvd_status hvd_local_rank(int* out) {
  return topology(out, [] { return hvd::localRank(); });
}
hvd_status hvd_local_size(int* out) {
  return topology(out, [] { return hvd::localSize(); });
}
hvd_status hvd_cross_rank(int* out) {
  return topology(out, [] { return hvd::crossRank(); });
}
hvd_status hvd_cross_size(int* out) {
  return topology(out, [] { return hvd::crossSize(); });
}

hvd_status hvd_add_process_set(const int* ranks, int count, int* process_set_id) {
  return guarded([&] {
    if ((ranks == nullptr && count > 0) || count < 0) throw hvd::InvalidArgument("bad rank list");
    int id = hvd::addProcessSet(std::vector<int>(ranks, ranks + count));
    if (process_set_id != nullptr) *process_set_id = id;
  });
}

hvd_status hvd_remove_process_set(int process_set_id, int* removed) {
  return guarded([&] {
    bool r = hvd::removeProcessSet(process_set_id);
    if (removed != nullptr) *removed = r ? 1 : 0;
  });
}

hvd_status hvd_allreduce_async(const void* in, void* out, int64_t count, int dtype, int op, double prescale,
                               double postscale, const char* name, int process_set, hvd_handle* handle) {
  return guarded([&] {
    if (op < 0 || op > static_cast<int>(hvd::ReduceOp::kProduct)) {
      throw hvd::InvalidArgument("unknown reduce op " + std::to_string(op));
    }
    hvd::Options o = options(name, process_set);
    o.op = static_cast<hvd::ReduceOp>(op);
    o.prescale = prescale;
    o.postscale = postscale;
    returnHandle(hvd::allreduceAsync(flat(in, count, dtype), flat(out, count, dtype), o), handle);
  });
}

hvd_status hvd_broadcast_async(void* buffer, int64_t count, int dtype, int root, const char* name, int process_set,
                               hvd_handle* handle) {
  return guarded([&] {
    hvd::Options o = options(name, process_set);
    o.root = root;
    returnHandle(hvd::broadcastAsync(flat(buffer, count, dtype), o), handle);
  });
}

hvd_status hvd_allgather_async(const void* in, int64_t rows, int64_t row_elements, int dtype, const char* name,
                               int process_set, hvd_handle* handle) {
  return guarded([&] {
    hvd::TensorView v = flat(in, rows * row_elements, dtype);
    v.shape = {rows, row_elements};
    returnHandle(hvd::allgatherAsync(v, options(name, process_set)), handle);
  });
}

hvd_status hvd_barrier(int process_set) {
  return guarded([&] { hvd::barrier(process_set); });
}

hvd_status hvd_join(int* last_joined_rank) {
  return guarded([&] {
    int last = hvd::join();
    if (last_joined_rank != nullptr) *last_joined_rank = last;
  });
}

int hvd_handle_done(hvd_handle handle) {
  try {
    return handle != nullptr && handle->work->isCompleted() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

hvd_status hvd_wait(hvd_handle handle) {
  return guarded([&] {
    if (handle == nullptr) throw hvd::InvalidArgument("handle is NULL");
    handle->work->wait();
  });
}

hvd_status hvd_wait_for(hvd_handle handle, int64_t timeout_ms) {
  bool done = false;
  hvd_status status = guarded([&] {
    if (handle == nullptr) throw hvd::InvalidArgument("handle is NULL");
    done = handle->work->waitFor(std::chrono::milliseconds(timeout_ms));
  });
  if (status == HVD_OK && !done) return fail(HVD_ERR_TIMED_OUT_WAITING, "operation still in progress");
  return status;
}

hvd_status hvd_handle_output(hvd_handle handle, int index, const void** data, int64_t* count) {
  return guarded([&] {
    if (handle == nullptr) throw hvd::InvalidArgument("handle is NULL");
    if (!handle->work->isCompleted()) throw hvd::InvalidArgument("operation has not completed");
    const auto& outputs = handle->work->outputs();
    if (index < 0 || static_cast<size_t>(index) >= outputs.size() || outputs[index].view.data == nullptr) {
      throw hvd::InvalidArgument("no engine-allocated output " + std::to_string(index));
    }
    if (data != nullptr) *data = outputs[index].view.data;
    if (count != nullptr) *count = outputs[index].view.numElements();
  });
}

void hvd_handle_release(hvd_handle handle) { delete handle; }

hvd_status hvd_allreduce(const void* in, void* out, int64_t count, int dtype, int op, const char* name) {
  hvd_handle handle = nullptr;
  hvd_status status = hvd_allreduce_async(in, out, count, dtype, op, 1.0, 1.0, name, 0, &handle);
  if (status != HVD_OK) return status;
  status = hvd_wait(handle);
  hvd_handle_release(handle);
  return status;
}

hvd_status hvd_broadcast(void* buffer, int64_t count, int dtype, int root, const char* name) {
  hvd_handle handle = nullptr;
  hvd_status status = hvd_broadcast_async(buffer, count, dtype, root, name, 0, &handle);
  if (status != HVD_OK) return status;
  status = hvd_wait(handle);
  hvd_handle_release(handle);
  return status;
}

}  // extern "C"
