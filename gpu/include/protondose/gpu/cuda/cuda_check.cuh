#pragma once
// For the .cu files of protondose modules (gpu/, engine/); never included by a .cpp file.
// Every CUDA runtime call and launch is checked; failures become CudaError
// naming the call, the file:line and CUDA's own message.
#include <cuda_runtime.h>

#include <string>

#include "protondose/core/error.h"

namespace protondose::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                          int line) {
  throw CudaError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

}  // namespace protondose::cuda

#define PD_CUDA_CHECK(call)                                                           \
  do {                                                                                \
    const cudaError_t pd_status_ = (call);                                            \
    if (pd_status_ != cudaSuccess)                                                    \
      ::protondose::cuda::throw_cuda_error(pd_status_, #call, __FILE__, __LINE__);    \
  } while (0)

#define PD_CUDA_CHECK_LAUNCH(name) PD_CUDA_CHECK(cudaPeekAtLastError())
