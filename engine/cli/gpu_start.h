#pragma once
/// \file gpu_start.h
/// Starts GPUs (CUDA context, kernel loading and configuration) on threads of
/// their own while a subcommand reads its DICOM files: a one-shot process
/// would otherwise pay both one after the other (at 1 mm, ~0.4 s of GPU start
/// and ~0.3 s of reading and CT conversion on an H100 host).

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
        GpuStartTimings t;
        try {
          t = initialize_gpu_device(device);
        } catch (const std::exception&) {
        }
        if (i == 0) first_ = t;
      });
  }
  GpuStart(const GpuStart&) = delete;
  GpuStart& operator=(const GpuStart&) = delete;
  ~GpuStart() { wait(); }

  /// Waits until every device has started; returns what the first one's
  /// start took (zeros when there was none, or when it failed).
  GpuStartTimings wait() {
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
    return first_;
  }

 private:
  std::vector<std::thread> threads_;
  GpuStartTimings first_;
};

}  // namespace protondose::cli
