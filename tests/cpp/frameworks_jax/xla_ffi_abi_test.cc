// Horovod's declaration of XLA's FFI C ABI (cpp/frameworks/jax/xla_ffi_abi.inc) against jaxlib's
// real xla/ffi/api/c_api.h, at compile time: the API version, every enumerator value, and the
// offset of every declared field and the struct size XLA expects of every declared struct. A
// build that found no jax compiles without the header, so there is nothing to compare and the
// test says so (skipped).
#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>

#ifdef HVD_XLA_FFI_HEADER

#include "frameworks/jax/xla_ffi.h"
#include "xla/ffi/api/c_api.h"

namespace {

namespace ours = hvd::jax::xla;

static_assert(ours::kXlaFfiApiMajor == XLA_FFI_API_MAJOR, "XLA FFI major version differs from c_api.h");
// The real header may be newer (a later minor version only appends); never older.
static_assert(ours::kXlaFfiApiMinor <= XLA_FFI_API_MINOR, "c_api.h is older than the FFI API Horovod declares");

#define HVD_SAME_VALUE(name) \
  static_assert(static_cast<long>(ours::name) == static_cast<long>(::name), #name ": value differs from c_api.h");
HVD_SAME_VALUE(XLA_FFI_Extension_Metadata)
HVD_SAME_VALUE(XLA_FFI_Error_Code_OK)
HVD_SAME_VALUE(XLA_FFI_Error_Code_UNKNOWN)
HVD_SAME_VALUE(XLA_FFI_Error_Code_INVALID_ARGUMENT)
HVD_SAME_VALUE(XLA_FFI_Error_Code_DEADLINE_EXCEEDED)
HVD_SAME_VALUE(XLA_FFI_Error_Code_FAILED_PRECONDITION)
HVD_SAME_VALUE(XLA_FFI_Error_Code_ABORTED)
HVD_SAME_VALUE(XLA_FFI_Error_Code_INTERNAL)
HVD_SAME_VALUE(XLA_FFI_Error_Code_UNAVAILABLE)
HVD_SAME_VALUE(XLA_FFI_DataType_INVALID)
HVD_SAME_VALUE(XLA_FFI_DataType_PRED)
HVD_SAME_VALUE(XLA_FFI_DataType_S8)
HVD_SAME_VALUE(XLA_FFI_DataType_S16)
HVD_SAME_VALUE(XLA_FFI_DataType_S32)
HVD_SAME_VALUE(XLA_FFI_DataType_S64)
HVD_SAME_VALUE(XLA_FFI_DataType_U8)
HVD_SAME_VALUE(XLA_FFI_DataType_U16)
HVD_SAME_VALUE(XLA_FFI_DataType_U32)
HVD_SAME_VALUE(XLA_FFI_DataType_U64)
HVD_SAME_VALUE(XLA_FFI_DataType_F16)
HVD_SAME_VALUE(XLA_FFI_DataType_F32)
HVD_SAME_VALUE(XLA_FFI_DataType_F64)
HVD_SAME_VALUE(XLA_FFI_DataType_BF16)
HVD_SAME_VALUE(XLA_FFI_DataType_TOKEN)
HVD_SAME_VALUE(XLA_FFI_ArgType_BUFFER)
HVD_SAME_VALUE(XLA_FFI_RetType_BUFFER)
HVD_SAME_VALUE(XLA_FFI_AttrType_ARRAY)
HVD_SAME_VALUE(XLA_FFI_AttrType_DICTIONARY)
HVD_SAME_VALUE(XLA_FFI_AttrType_SCALAR)
HVD_SAME_VALUE(XLA_FFI_AttrType_STRING)
HVD_SAME_VALUE(XLA_FFI_ExecutionStage_INSTANTIATE)
HVD_SAME_VALUE(XLA_FFI_ExecutionStage_PREPARE)
HVD_SAME_VALUE(XLA_FFI_ExecutionStage_INITIALIZE)
HVD_SAME_VALUE(XLA_FFI_ExecutionStage_EXECUTE)
#undef HVD_SAME_VALUE

// Enumerations travel as their underlying type inside the structs.
#define HVD_SAME_SIZE(type) static_assert(sizeof(ours::type) == sizeof(::type), #type ": size differs from c_api.h");
HVD_SAME_SIZE(XLA_FFI_Extension_Type)
HVD_SAME_SIZE(XLA_FFI_Error_Code)
HVD_SAME_SIZE(XLA_FFI_DataType)
HVD_SAME_SIZE(XLA_FFI_ArgType)
HVD_SAME_SIZE(XLA_FFI_RetType)
HVD_SAME_SIZE(XLA_FFI_AttrType)
HVD_SAME_SIZE(XLA_FFI_ExecutionStage)
HVD_SAME_SIZE(XLA_FFI_Handler_Traits)
HVD_SAME_SIZE(XLA_FFI_ByteSpan)
HVD_SAME_SIZE(XLA_FFI_Scalar)
HVD_SAME_SIZE(XLA_FFI_TypeId)
#undef HVD_SAME_SIZE

#define HVD_SAME_OFFSET(type, field)                                                                                \
  static_assert(                                                                                                    \
      offsetof(ours::type, field) == offsetof(::type, field) && sizeof(ours::type::field) == sizeof(::type::field), \
      #type "::" #field ": offset or size differs from c_api.h");
// The struct_size value XLA expects (its <type>_STRUCT_SIZE) equals Horovod's.
#define HVD_SAME_STRUCT_SIZE(type, last)                                       \
  static_assert(HVD_XLA_STRUCT_SIZE(ours::type, last) == ::type##_STRUCT_SIZE, \
                #type ": struct size differs from c_api.h");

HVD_SAME_OFFSET(XLA_FFI_Extension_Base, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Extension_Base, type)
HVD_SAME_OFFSET(XLA_FFI_Extension_Base, next)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Extension_Base, next)

HVD_SAME_OFFSET(XLA_FFI_Api_Version, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Api_Version, extension_start)
HVD_SAME_OFFSET(XLA_FFI_Api_Version, major_version)
HVD_SAME_OFFSET(XLA_FFI_Api_Version, minor_version)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Api_Version, minor_version)

HVD_SAME_OFFSET(XLA_FFI_Error_Create_Args, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Error_Create_Args, extension_start)
HVD_SAME_OFFSET(XLA_FFI_Error_Create_Args, message)
HVD_SAME_OFFSET(XLA_FFI_Error_Create_Args, errc)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Error_Create_Args, errc)

HVD_SAME_OFFSET(XLA_FFI_Buffer, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Buffer, extension_start)
HVD_SAME_OFFSET(XLA_FFI_Buffer, dtype)
HVD_SAME_OFFSET(XLA_FFI_Buffer, data)
HVD_SAME_OFFSET(XLA_FFI_Buffer, rank)
HVD_SAME_OFFSET(XLA_FFI_Buffer, dims)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Buffer, dims)

HVD_SAME_OFFSET(XLA_FFI_ByteSpan, ptr)
HVD_SAME_OFFSET(XLA_FFI_ByteSpan, len)
HVD_SAME_OFFSET(XLA_FFI_Scalar, dtype)
HVD_SAME_OFFSET(XLA_FFI_Scalar, value)
HVD_SAME_OFFSET(XLA_FFI_TypeId, type_id)

HVD_SAME_OFFSET(XLA_FFI_Args, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Args, extension_start)
HVD_SAME_OFFSET(XLA_FFI_Args, size)
HVD_SAME_OFFSET(XLA_FFI_Args, types)
HVD_SAME_OFFSET(XLA_FFI_Args, args)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Args, args)

HVD_SAME_OFFSET(XLA_FFI_Rets, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Rets, extension_start)
HVD_SAME_OFFSET(XLA_FFI_Rets, size)
HVD_SAME_OFFSET(XLA_FFI_Rets, types)
HVD_SAME_OFFSET(XLA_FFI_Rets, rets)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Rets, rets)

HVD_SAME_OFFSET(XLA_FFI_Attrs, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Attrs, extension_start)
HVD_SAME_OFFSET(XLA_FFI_Attrs, size)
HVD_SAME_OFFSET(XLA_FFI_Attrs, types)
HVD_SAME_OFFSET(XLA_FFI_Attrs, names)
HVD_SAME_OFFSET(XLA_FFI_Attrs, attrs)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Attrs, attrs)

HVD_SAME_OFFSET(XLA_FFI_CallFrame, struct_size)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, extension_start)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, api)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, ctx)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, stage)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, args)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, rets)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, attrs)
HVD_SAME_OFFSET(XLA_FFI_CallFrame, future)
HVD_SAME_STRUCT_SIZE(XLA_FFI_CallFrame, attrs)

HVD_SAME_OFFSET(XLA_FFI_Metadata, struct_size)
HVD_SAME_OFFSET(XLA_FFI_Metadata, api_version)
HVD_SAME_OFFSET(XLA_FFI_Metadata, traits)
HVD_SAME_OFFSET(XLA_FFI_Metadata, state_type_id)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Metadata, traits)

HVD_SAME_OFFSET(XLA_FFI_Metadata_Extension, extension_base)
HVD_SAME_OFFSET(XLA_FFI_Metadata_Extension, metadata)
HVD_SAME_STRUCT_SIZE(XLA_FFI_Metadata_Extension, metadata)
#undef HVD_SAME_OFFSET
#undef HVD_SAME_STRUCT_SIZE

// The function table: Horovod declares its start, up to the entry it calls.
static_assert(offsetof(ours::XLA_FFI_Api_Prefix, struct_size) == offsetof(::XLA_FFI_Api, struct_size));
static_assert(offsetof(ours::XLA_FFI_Api_Prefix, extension_start) == offsetof(::XLA_FFI_Api, extension_start));
static_assert(offsetof(ours::XLA_FFI_Api_Prefix, api_version) == offsetof(::XLA_FFI_Api, api_version));
static_assert(offsetof(ours::XLA_FFI_Api_Prefix, internal_api) == offsetof(::XLA_FFI_Api, internal_api));
static_assert(offsetof(ours::XLA_FFI_Api_Prefix, error_create) == offsetof(::XLA_FFI_Api, XLA_FFI_Error_Create),
              "XLA_FFI_Api::XLA_FFI_Error_Create: offset differs from c_api.h");

// The entry's and the handler's signatures, with Horovod's types put in place of XLA's.
static_assert(sizeof(ours::XLA_FFI_Error_Create*) == sizeof(::XLA_FFI_Error_Create*));
static_assert(std::is_same_v<ours::XLA_FFI_Error_Create, ours::XLA_FFI_Error*(ours::XLA_FFI_Error_Create_Args*)>);
static_assert(std::is_same_v<::XLA_FFI_Error_Create, ::XLA_FFI_Error*(::XLA_FFI_Error_Create_Args*)>);
static_assert(std::is_same_v<::XLA_FFI_Handler, ::XLA_FFI_Error*(::XLA_FFI_CallFrame*)>);
static_assert(std::is_same_v<ours::XLA_FFI_Handler, ours::XLA_FFI_Error*(ours::XLA_FFI_CallFrame*)>);

}  // namespace

TEST(XlaFfiAbi, DeclarationMatchesJaxlibHeader) {
  SUCCEED() << "checked at compile time against c_api.h (XLA FFI API " << XLA_FFI_API_MAJOR << "." << XLA_FFI_API_MINOR
            << ")";
}

#else

TEST(XlaFfiAbi, DeclarationMatchesJaxlibHeader) {
  GTEST_SKIP() << "jax is not installed for the Python this build found: no xla/ffi/api/c_api.h to compare with";
}

#endif
