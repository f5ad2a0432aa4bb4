#pragma once
/// \file gpu_start.h
/// Starts GPUs (CUDA context, kernel loading and configuration) on threads of
/// their own while a subcommand reads its DICOM files: a one-shot process
/// would otherwise pay both one after the other (at 1 mm, ~0.4 s of GPU start
/// and ~0.3 s of reading and CT conversion on an H100 host).

#include <chrono>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

#include "protondose/gpu/device_superposition.h"

namespace protondose::cli {

class GpuStart {
 public:
  /// Starts each of `devices` (none: nothing to do). A failure is not
  /// reported here: the engine meets the same failure when it uses the device
  /// and reports it there, with its context.
  explicit GpuStart(const std::vector<int>& devices) {
    for (std::size_t i = 0; i < devices.size(); ++i)
      threads_.emplace_back([this, i, device = devices[i]] {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          initialize_gpu_device(device);
        } catch (const std::exception&) {
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i == 0) seconds_ = s;
      });
  }
  GpuStart(const GpuStart&) = delete;
  GpuStart& operator=(const GpuStart&) = delete;
  ~GpuStart() { wait(); }

  /// Waits until every device has started; returns the seconds the first
  /// one's start took (0 when there was none).
  double wait() {
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
    return seconds_;
  }

 private:
  std::vector<std::thread> threads_;
  double seconds_ = 0;
};

}  // namespace protondose::cli
