#pragma once
// For the .cu files of protondose modules: one-time kernel configuration
// (cudaFuncSetAttribute: shared-memory carveout, dynamic shared-memory limit)
// done per CUDA device. A function's attributes belong to the device's
// context, so a process-wide "done" flag would leave the second GPU of a
// multi-GPU batch unconfigured — and a kernel that needs more than 48 KiB of
// dynamic shared memory would fail to launch there.
#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <string>

#include "protondose/core/error.h"
#include "protondose/gpu/cuda/cuda_check.cuh"

namespace protondose::cuda {

/// The largest value a setting has been raised to on each device (grow-only),
/// thread-safe: workers on different devices configure concurrently.
class PerDeviceSetting {
 public:
  /// Calls configure(value) on the current device when value exceeds what was
  /// configured there before (first call: any value ≥ 0).
  template <class Configure>
  void raise_to(int value, Configure&& configure) {
    std::lock_guard<std::mutex> lock(mutex_);
    int& configured = slot_of_current_device();
    if (value <= configured) return;
    configure(value);
    configured = value;
  }
  /// Calls configure() once per device.
  template <class Configure>
  void once(Configure&& configure) {
    std::lock_guard<std::mutex> lock(mutex_);
    int& configured = slot_of_current_device();
    if (configured >= 0) return;
    configure();
    configured = 0;
  }

 private:
  static constexpr int kMaxDevices = 64;
  int& slot_of_current_device() {
    int device = 0;
    PD_CUDA_CHECK(cudaGetDevice(&device));
    if (device < 0 || device >= kMaxDevices)
      throw InternalError("PerDeviceSetting: CUDA device " + std::to_string(device) + " beyond " +
                          std::to_string(kMaxDevices));
    return configured_[static_cast<std::size_t>(device)];
  }
  std::mutex mutex_;
  std::array<int, kMaxDevices> configured_ = make_unconfigured();
  static std::array<int, kMaxDevices> make_unconfigured() {
    std::array<int, kMaxDevices> a{};
    a.fill(-1);
    return a;
  }
};

}  // namespace protondose::cuda
