// The CUDA loader (cuda_library.h) against fake libraries built by tests/cpp/CMakeLists.txt and
// Horovod's real kernel library: which library wins, what is refused and how the refusal reads.
#include "backends/cuda/cuda_library.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/build_reports.h"

namespace hvd::cuda {
namespace {

// A search that finds nothing by itself: no wheels, sonames no system has, no kernel folder.
CudaSearch emptySearch() {
  CudaSearch search;
  search.runtimeSonames = {"libhvd_test_no_such_cudart.so.13"};
  search.ncclSonames = {"libhvd_test_no_such_nccl.so.2"};
  search.kernelsDir = "/nonexistent-hvd-kernels";
  return search;
}

EnvLookup env(std::vector<std::pair<std::string, std::string>> values) { return mapEnvironment(std::move(values)); }

TEST(CudaLibrary, EnvironmentOverridesWin) {
  // The search alone would find this machine's libcudart.so.13 if it has one: the variables win.
  CudaSearch search = defaultCudaSearch();
  CudaLibraries libs = loadCudaLibraries(
      env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART}, {"HOROVOD_NCCL_LIBRARY", HVD_TEST_FAKE_NCCL}}), search);
  ASSERT_NE(libs.api, nullptr) << libs.error;
  EXPECT_EQ(libs.error, "");
  EXPECT_EQ(libs.runtimePath, HVD_TEST_FAKE_CUDART);
  EXPECT_EQ(libs.kernelsPath, HVD_TEST_FAKE_CUDART);  // the runtime library exports the kernels
  EXPECT_EQ(libs.ncclPath, HVD_TEST_FAKE_NCCL);
  int devices = 0;
  EXPECT_EQ(libs.api->rt.getDeviceCount(&devices), cudaSuccess);
  EXPECT_EQ(devices, 7);  // the fake's answer: the table points into the fake
  ASSERT_NE(libs.api->nccl, nullptr) << libs.ncclError;
  int version = 0;
  EXPECT_EQ(libs.api->nccl->getVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 99999);
  EXPECT_EQ(libs.api->kernels->version, kHvdCudaKernelsVersion);
}

TEST(CudaLibrary, MissingEntryPointIsNamed) {
  CudaLibraries libs = loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART_MISSING}}), emptySearch());
  EXPECT_EQ(libs.api, nullptr);
  EXPECT_NE(libs.error.find(HVD_TEST_FAKE_CUDART_MISSING), std::string::npos) << libs.error;
  EXPECT_NE(libs.error.find("lacks cudaEventSynchronize"), std::string::npos) << libs.error;
}

TEST(CudaLibrary, KernelTableOfAnotherVersionIsRefused) {
  CudaLibraries libs = loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART_STALE}}), emptySearch());
  EXPECT_EQ(libs.api, nullptr);
  EXPECT_NE(libs.error.find("kernel table version 99, this core needs 1"), std::string::npos) << libs.error;
  EXPECT_NE(libs.error.find(HVD_TEST_FAKE_CUDART_STALE), std::string::npos) << libs.error;
}

TEST(CudaLibrary, KernelsComeFromHorovodsKernelLibrary) {
  // A runtime without the kernel symbol: the real libhorovod_cuda_kernels.so (loads without a GPU)
  // from the kernel folder, whose table must be this core's version.
  CudaSearch search = emptySearch();
  search.kernelsDir = HVD_TEST_KERNELS_DIR;
  CudaLibraries libs = loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART_PLAIN}}), search);
  ASSERT_NE(libs.api, nullptr) << libs.error;
  EXPECT_EQ(libs.kernelsPath, std::string(HVD_TEST_KERNELS_DIR) + "/libhorovod_cuda_kernels.so");
  EXPECT_EQ(libs.api->kernels->version, kHvdCudaKernelsVersion);
  EXPECT_NE(libs.api->kernels->batchedCopy, nullptr);
  EXPECT_NE(libs.api->kernels->scale, nullptr);
}

TEST(CudaLibrary, MissingKernelLibraryIsReported) {
  CudaLibraries libs = loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART_PLAIN}}), emptySearch());
  EXPECT_EQ(libs.api, nullptr);
  EXPECT_NE(libs.error.find("/nonexistent-hvd-kernels/libhorovod_cuda_kernels.so"), std::string::npos) << libs.error;
  EXPECT_NE(libs.error.find("kernel library could not be loaded"), std::string::npos) << libs.error;
}

TEST(CudaLibrary, NoCudaRuntimeOnTheMachine) {
  CudaLibraries libs = loadCudaLibraries(env({}), emptySearch());
  EXPECT_EQ(libs.api, nullptr);
  EXPECT_NE(libs.error.find("the CUDA runtime was not found"), std::string::npos) << libs.error;
  EXPECT_NE(libs.error.find("libhvd_test_no_such_cudart.so.13"), std::string::npos) << libs.error;
  EXPECT_EQ(libs.runtimePath, "");
}

TEST(CudaLibrary, BadOverridePathFailsWithoutFallingBack) {
  CudaLibraries libs =
      loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", "/nonexistent/libcudart.so.13"}}), defaultCudaSearch());
  EXPECT_EQ(libs.api, nullptr);
  EXPECT_EQ(libs.error.rfind("HOROVOD_CUDA_LIBRARY=/nonexistent/libcudart.so.13: ", 0), 0u) << libs.error;
}

TEST(CudaLibrary, NcclIsOptional) {
  CudaLibraries libs = loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART}}), emptySearch());
  ASSERT_NE(libs.api, nullptr) << libs.error;
  EXPECT_EQ(libs.api->nccl, nullptr);
  EXPECT_NE(libs.ncclError.find("NCCL was not found"), std::string::npos) << libs.ncclError;
  EXPECT_NE(libs.ncclError.find("HOROVOD_NCCL_LIBRARY"), std::string::npos) << libs.ncclError;
}

TEST(CudaLibrary, NcclWithoutItsEntryPointsIsNamed) {
  // A CUDA runtime handed over as NCCL: the first missing NCCL symbol is named.
  CudaLibraries libs = loadCudaLibraries(
      env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART}, {"HOROVOD_NCCL_LIBRARY", HVD_TEST_FAKE_CUDART}}),
      emptySearch());
  ASSERT_NE(libs.api, nullptr) << libs.error;
  EXPECT_EQ(libs.api->nccl, nullptr);
  EXPECT_NE(libs.ncclError.find("lacks ncclGetVersion, ncclGetErrorString"), std::string::npos) << libs.ncclError;
}

TEST(CudaLibrary, NcclFromTheWheelFolder) {
  // <site-packages>/nvidia/nccl/lib/libnccl.so.2, as the nvidia-nccl-cu13 wheel installs it.
  std::filesystem::path packages =
      std::filesystem::temp_directory_path() / ("hvd_cuda_wheel_" + std::to_string(getpid()));
  std::filesystem::create_directories(packages / "nvidia/nccl/lib");
  std::filesystem::copy_file(HVD_TEST_FAKE_NCCL, packages / "nvidia/nccl/lib/libhvd_test_wheel_nccl.so.2",
                             std::filesystem::copy_options::overwrite_existing);
  CudaSearch search = emptySearch();
  search.packageDirs = {"/nonexistent-site-packages", packages.string()};
  search.ncclSonames = {"libhvd_test_wheel_nccl.so.2"};
  CudaLibraries libs = loadCudaLibraries(env({{"HOROVOD_CUDA_LIBRARY", HVD_TEST_FAKE_CUDART}}), search);
  std::filesystem::remove_all(packages);
  ASSERT_NE(libs.api, nullptr) << libs.error;
  ASSERT_NE(libs.api->nccl, nullptr) << libs.ncclError;
  EXPECT_EQ(libs.ncclPath, (packages / "nvidia/nccl/lib/libhvd_test_wheel_nccl.so.2").string());
}

TEST(CudaLibrary, BuildReportsArePublished) {
  auto build = buildReport("cuda");
  ASSERT_TRUE(build.has_value());
  EXPECT_EQ(reportValue(*build, "nccl_version_code"), std::to_string(NCCL_VERSION_CODE));
  EXPECT_TRUE(cudaBuilt());
  EXPECT_TRUE(buildReport("cuda_libraries").has_value());
}

}  // namespace
}  // namespace hvd::cuda
