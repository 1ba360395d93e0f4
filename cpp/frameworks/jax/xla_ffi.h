// Horovod's declaration of the part of XLA's FFI C ABI its JAX handlers use (xla_ffi_abi.inc),
// in namespace hvd::jax::xla. Nothing here comes from jaxlib's headers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvd::jax::xla {
#include "xla_ffi_abi.inc"
}  // namespace hvd::jax::xla

// The size XLA expects in a struct's struct_size field: up to the end of its last declared field
// (not sizeof, which may add tail padding).
#define HVD_XLA_STRUCT_SIZE(type, last) (offsetof(type, last) + sizeof(((type*)nullptr)->last))
