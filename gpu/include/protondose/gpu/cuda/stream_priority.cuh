#pragma once
// For the .cu files of protondose modules (gpu/, engine/): stream priorities.
#include <cuda_runtime.h>

#include "protondose/gpu/cuda/cuda_check.cuh"

namespace protondose::cuda {

/// A stream priority of the current device: its greatest (numerically the
/// lowest: −5 on an H100), whose kernels' blocks are scheduled before those of
/// other streams as SMs free up, or its least (0, the default).
inline int stream_priority(bool greatest) {
  int least_priority = 0, greatest_priority = 0;
  PD_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  return greatest ? greatest_priority : least_priority;
}

/// The priority one step above the least (−1 on an H100; the least where the
/// device has only one): for a stream whose kernels' blocks should go before
/// those of a stream of the least priority running beside it.
inline int stream_priority_above_least() {
  int least_priority = 0, greatest_priority = 0;
  PD_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  return least_priority > greatest_priority ? least_priority - 1 : least_priority;
}

}  // namespace protondose::cuda
