#include "backends/cuda/device_wide.h"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cuda/device_util.h"
#include "common/logging.h"

namespace hvd::cuda {
namespace {

struct Release {
  void* data;
  bool pooled;
};

// One GPU's releases: a thread that waits for released blocks, synchronizes the device, then
// frees every block released before that synchronize began. Process-wide and never destroyed
// (tensors may be dropped at any time, up to the process's exit).
class ReleaseThread {
 public:
  ReleaseThread(const CudaApi& api, int device) : api_(api), device_(device) {
    std::thread([this] { loop(); }).detach();
  }

  void add(Release r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(r);
      ++requested_;
    }
    wake_.notify_all();
  }

  // Waits until the releases added before the call are done.
  void flush() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = requested_;
    wake_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  void loop() {
    std::vector<Release> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        done_ += batch.size();
        batch.clear();
        wake_.notify_all();
        wake_.wait(lock, [this] { return !pending_.empty(); });
        batch.swap(pending_);
      }
      try {
        DeviceGuard guard(api_, device_);
        synchronizeDevice(api_, device_);
        for (const Release& r : batch) {
          // The host has observed all earlier work: the legacy stream's free is ordered after it.
          const cudaError_t status = r.pooled ? api_.rt.freeAsync(r.data, nullptr) : api_.rt.free(r.data);
          if (status != cudaSuccess) {
            HVD_LOG(Warning) << (r.pooled ? "cudaFreeAsync" : "cudaFree") << " of an output on GPU " << device_
                             << " failed after a device synchronize: " << api_.rt.getErrorString(status);
          }
        }
      } catch (const std::exception& e) {
        // The device could not be synchronized: freeing could free memory still in use, so the
        // batch is kept (a leak, said in the log).
        HVD_LOG(Warning) << batch.size() << " output(s) on GPU " << device_ << " are not released: " << e.what();
      }
    }
  }

  const CudaApi& api_;
  const int device_;
  std::mutex mutex_;
  std::condition_variable wake_;  // pending_ grew, or done_ did
  std::vector<Release> pending_;
  uint64_t requested_ = 0;  // releases added
  uint64_t done_ = 0;       // releases carried out (or failed)
};

std::mutex gThreadsMutex;
// Never freed: tensors may be dropped at any time, up to the process's exit.
auto* gThreads = new std::map<std::pair<const CudaApi*, int>, ReleaseThread*>;

}  // namespace

void synchronizeDevice(const CudaApi& api, int device) {
  DeviceGuard guard(api, device);
  checkCuda(api, api.rt.deviceSynchronize(), "cudaDeviceSynchronize", device);
}

void releaseAfterDeviceSync(const CudaApi& api, int device, void* data, bool pooled) {
  try {
    ReleaseThread* thread = nullptr;
    {
      std::lock_guard<std::mutex> lock(gThreadsMutex);
      ReleaseThread*& slot = (*gThreads)[{&api, device}];
      if (slot == nullptr) slot = new ReleaseThread(api, device);
      thread = slot;
    }
    thread->add(Release{data, pooled});
  } catch (const std::exception& e) {
    HVD_LOG(Warning) << "An output on GPU " << device << " could not be released: " << e.what();
  }
}

void flushDeviceWideReleases(const CudaApi& api) {
  std::vector<ReleaseThread*> threads;
  {
    std::lock_guard<std::mutex> lock(gThreadsMutex);
    for (auto& [key, thread] : *gThreads) {
      if (key.first == &api) threads.push_back(thread);
    }
  }
  for (ReleaseThread* thread : threads) thread->flush();
}

}  // namespace hvd::cuda
