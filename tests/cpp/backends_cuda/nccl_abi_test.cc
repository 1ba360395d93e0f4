// Horovod's declaration of NCCL's ABI (cpp/backends/cuda/nccl_abi/) against the real nccl.h, at
// compile time: every enumerator value, the layout of the types, and every entry point's
// signature with Horovod's types mapped onto NCCL's. A build that found no real nccl.h compiles
// against the declaration itself, so there is nothing to compare and the test says so (skipped).
#include <gtest/gtest.h>
#include <nccl.h>

#include <type_traits>

#ifndef HVD_NCCL_ABI_DECLARATION

namespace hvd_abi {
#include "backends/cuda/nccl_abi/nccl_abi.inc"
#define HVD_NCCL_ABI_FUNCTION_TYPE(ret, name, params) using name##_fn = ret params;
HVD_NCCL_ABI_FUNCTIONS(HVD_NCCL_ABI_FUNCTION_TYPE)
#undef HVD_NCCL_ABI_FUNCTION_TYPE
}  // namespace hvd_abi

namespace {

// The real nccl.h type a declared type stands for.
template <class T>
struct Real {
  using type = T;
};
template <>
struct Real<hvd_abi::ncclComm_t> {
  using type = ::ncclComm_t;
};
template <>
struct Real<hvd_abi::ncclUniqueId> {
  using type = ::ncclUniqueId;
};
template <>
struct Real<hvd_abi::ncclResult_t> {
  using type = ::ncclResult_t;
};
template <>
struct Real<hvd_abi::ncclRedOp_t> {
  using type = ::ncclRedOp_t;
};
template <>
struct Real<hvd_abi::ncclDataType_t> {
  using type = ::ncclDataType_t;
};
template <class T>
struct Real<T*> {
  using type = typename Real<T>::type*;
};
template <class T>
struct Real<const T> {
  using type = const typename Real<T>::type;
};
template <class R, class... A>
struct Real<R(A...)> {
  using type = typename Real<R>::type(typename Real<A>::type...);
};

#define HVD_SAME_SIGNATURE(ret, name, params)                                     \
  static_assert(std::is_same_v<Real<hvd_abi::name##_fn>::type, decltype(::name)>, \
                #name ": the declaration in cpp/backends/cuda/nccl_abi differs from nccl.h");
HVD_NCCL_ABI_FUNCTIONS(HVD_SAME_SIGNATURE)
#undef HVD_SAME_SIGNATURE

#define HVD_SAME_VALUE(name) \
  static_assert(static_cast<long>(hvd_abi::name) == static_cast<long>(::name), #name ": value differs from nccl.h");
HVD_SAME_VALUE(ncclSuccess)
HVD_SAME_VALUE(ncclUnhandledCudaError)
HVD_SAME_VALUE(ncclSystemError)
HVD_SAME_VALUE(ncclInternalError)
HVD_SAME_VALUE(ncclInvalidArgument)
HVD_SAME_VALUE(ncclInvalidUsage)
HVD_SAME_VALUE(ncclRemoteError)
HVD_SAME_VALUE(ncclInProgress)
HVD_SAME_VALUE(ncclSum)
HVD_SAME_VALUE(ncclProd)
HVD_SAME_VALUE(ncclMax)
HVD_SAME_VALUE(ncclMin)
HVD_SAME_VALUE(ncclAvg)
HVD_SAME_VALUE(ncclMaxRedOp)
HVD_SAME_VALUE(ncclInt8)
HVD_SAME_VALUE(ncclChar)
HVD_SAME_VALUE(ncclUint8)
HVD_SAME_VALUE(ncclInt32)
HVD_SAME_VALUE(ncclInt)
HVD_SAME_VALUE(ncclUint32)
HVD_SAME_VALUE(ncclInt64)
HVD_SAME_VALUE(ncclUint64)
HVD_SAME_VALUE(ncclFloat16)
HVD_SAME_VALUE(ncclHalf)
HVD_SAME_VALUE(ncclFloat32)
HVD_SAME_VALUE(ncclFloat)
HVD_SAME_VALUE(ncclFloat64)
HVD_SAME_VALUE(ncclDouble)
HVD_SAME_VALUE(ncclBfloat16)
#undef HVD_SAME_VALUE

template <class A, class B>
constexpr bool kSameLayout = sizeof(A) == sizeof(B) && alignof(A) == alignof(B);
static_assert(kSameLayout<hvd_abi::ncclUniqueId, ::ncclUniqueId>, "ncclUniqueId: layout differs from nccl.h");
static_assert(kSameLayout<hvd_abi::ncclResult_t, ::ncclResult_t>, "ncclResult_t: size differs from nccl.h");
static_assert(kSameLayout<hvd_abi::ncclRedOp_t, ::ncclRedOp_t>, "ncclRedOp_t: size differs from nccl.h");
static_assert(kSameLayout<hvd_abi::ncclDataType_t, ::ncclDataType_t>, "ncclDataType_t: size differs from nccl.h");
// The declared version is the oldest NCCL it describes; the real header must be that or newer.
static_assert(NCCL_VERSION_CODE >= 21304, "nccl.h is older than the ABI Horovod declares (2.13.4)");

}  // namespace

TEST(NcclAbi, DeclarationMatchesRealHeader) {
  SUCCEED() << "checked at compile time against nccl.h " << NCCL_VERSION_CODE;
}

#else

TEST(NcclAbi, DeclarationMatchesRealHeader) {
  GTEST_SKIP() << "this build found no real nccl.h (it compiles against Horovod's declaration): nothing to compare";
}

#endif
