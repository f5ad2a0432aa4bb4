#pragma once
// For the .cu files of protondose modules (gpu/, engine/): stream priorities.
#include <cuda_runtime.h>

#include "protondose/gpu/cuda/cuda_check.cuh"

namespace protondose::cuda {

/// Where a stream's kernels stand when their blocks wait for an SM: blocks of
/// a stream of greater priority are scheduled first, as SMs free up (blocks
/// already running are not preempted).
enum class StreamPriority {
  kLeast,       ///< the default (0)
  kAboveLeast,  ///< one step above the least (−1 on an H100; the least where the device has only one)
  kGreatest,    ///< numerically the lowest (−5 on an H100)
};

/// The current device's priority value for `level`.
inline int stream_priority(StreamPriority level) {
  int least_priority = 0, greatest_priority = 0;
  PD_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  switch (level) {
    case StreamPriority::kGreatest: return greatest_priority;
    case StreamPriority::kAboveLeast: return least_priority > greatest_priority ? least_priority - 1 : least_priority;
    case StreamPriority::kLeast: break;
  }
  return least_priority;
}

}  // namespace protondose::cuda
