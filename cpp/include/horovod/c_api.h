/* C API of the Horovod core, for languages and programs that cannot use the C++ API.
 *
 * Every function returns an hvd_status (HVD_OK = 0); on failure, hvd_last_error() returns the
 * message of the last failure on the calling thread (valid until the next failing call on that
 * thread). No C++ exception ever crosses this boundary.
 *
 * The functions operate on the process's default runtime, the same one the C++ free functions
 * (horovod.h) use: hvd_init() here and hvd::init() there are interchangeable.
 *
 * Asynchronous operations return an hvd_handle that the caller must release with
 * hvd_handle_release() (after waiting or not; releasing does not cancel). Buffers passed to an
 * operation must stay valid until it has completed.
 */
#ifndef HOROVOD_C_API_H_
#define HOROVOD_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hvd_status {
  HVD_OK = 0,
  HVD_ERR_INVALID_ARGUMENT = 1, /* bad call detected before anything was sent (Python ValueError) */
  HVD_ERR_MISMATCH = 2,         /* ranks disagreed about an operation */
  HVD_ERR_TIMEOUT = 3,
  HVD_ERR_PEER_LOST = 4,        /* a peer process is gone */
  HVD_ERR_STORE = 5,            /* rendezvous store failure */
  HVD_ERR_ABORTED = 6,          /* shut down or aborted */
  HVD_ERR_INTERNAL = 7,         /* any other core error (incl. "not initialized") */
  HVD_ERR_TIMED_OUT_WAITING = 8 /* hvd_wait_for: the operation is still running */
} hvd_status;

/* Element types: values equal hvd::DataType. */
enum {
  HVD_UINT8 = 0,
  HVD_INT8 = 1,
  HVD_UINT16 = 2,
  HVD_INT16 = 3,
  HVD_INT32 = 4,
  HVD_INT64 = 5,
  HVD_FLOAT16 = 6,
  HVD_BFLOAT16 = 7,
  HVD_FLOAT32 = 8,
  HVD_FLOAT64 = 9,
  HVD_BOOL = 10
};

/* Reduce ops: values equal Horovod's public constants. */
enum { HVD_AVERAGE = 0, HVD_SUM = 1, HVD_ADASUM = 2, HVD_MIN = 3, HVD_MAX = 4, HVD_PRODUCT = 5 };

typedef struct hvd_handle_s* hvd_handle;

/* Message of the calling thread's last failure ("" if none). */
const char* hvd_last_error(void);

/* ---- Lifecycle and topology ---- */
hvd_status hvd_init(void);
hvd_status hvd_shutdown(void);
int hvd_is_initialized(void);
hvd_status hvd_rank(int* out);
hvd_status hvd_size(int* out);
hvd_status hvd_local_rank(int* out);
hvd_status hvd_local_size(int* out);
hvd_status hvd_cross_rank(int* out);
hvd_status hvd_cross_size(int* out);

/* ---- Process sets ---- */
hvd_status hvd_add_process_set(const int* ranks, int count, int* process_set_id);
hvd_status hvd_remove_process_set(int process_set_id, int* removed);

/* ---- Collectives on flat buffers of `count` elements ----
 * name: matching key across ranks (NULL or "" = auto-named); process_set: 0 = all ranks. */
hvd_status hvd_allreduce_async(const void* in, void* out, int64_t count, int dtype, int op, double prescale,
                               double postscale, const char* name, int process_set, hvd_handle* handle);
hvd_status hvd_broadcast_async(void* buffer, int64_t count, int dtype, int root, const char* name, int process_set,
                               hvd_handle* handle);
/* Rows of `row_elements` elements each; the output is allocated by the engine
 * (hvd_handle_output once completed). */
hvd_status hvd_allgather_async(const void* in, int64_t rows, int64_t row_elements, int dtype, const char* name,
                               int process_set, hvd_handle* handle);
hvd_status hvd_barrier(int process_set);
hvd_status hvd_join(int* last_joined_rank);

/* ---- Handles ---- */
/* 1 if completed (successfully or not), 0 otherwise. */
int hvd_handle_done(hvd_handle handle);
/* Waits for completion; returns the operation's status. */
hvd_status hvd_wait(hvd_handle handle);
/* Like hvd_wait, but returns HVD_ERR_TIMED_OUT_WAITING if not done after timeout_ms. */
hvd_status hvd_wait_for(hvd_handle handle, int64_t timeout_ms);
/* Engine-allocated output `index` of a completed operation (allgather): data pointer valid until
 * the handle is released; element count in *count. */
hvd_status hvd_handle_output(hvd_handle handle, int index, const void** data, int64_t* count);
void hvd_handle_release(hvd_handle handle);

/* Synchronous convenience. */
hvd_status hvd_allreduce(const void* in, void* out, int64_t count, int dtype, int op, const char* name);
hvd_status hvd_broadcast(void* buffer, int64_t count, int dtype, int root, const char* name);

#ifdef __cplusplus
}
#endif

#endif /* HOROVOD_C_API_H_ */
