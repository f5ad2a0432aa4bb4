#pragma once
/// \file approx_math.h
/// The GPU's special-function approximations (MUFU) that the hot loops take
/// instead of IEEE sequences (a float division or square root is ~10
/// instructions and a slow-path branch), subnormals flushed (.ftz): one place
/// for the inline PTX, used by the tensor-core scatter's weight tables
/// (gpu/src/half_erfc_walk.h) and the engine's layer kernel
/// (engine/src/beam_kernels.h). On the host, where CPU tests run the same
/// device code, the library's functions stand in.

#include <cmath>

#include "protondose/gpu/gaussian_kernel.h"  // PROTONDOSE_HOST_DEVICE

namespace protondose {

/// 1/x: rcp.approx.ftz (≤ 1 ulp) on the GPU, 1/x on the host.
PROTONDOSE_HOST_DEVICE inline float rcp_approx(float x) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return 1.0f / x;
#endif
}

/// 2^x: ex2.approx.ftz (≤ 2 ulp) on the GPU, exp2 on the host.
PROTONDOSE_HOST_DEVICE inline float exp2_approx(float x) {
#ifdef __CUDA_ARCH__
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return std::exp2(x);
#endif
}

/// 1/√x: rsqrt.approx.ftz on the GPU, 1/sqrt on the host.
PROTONDOSE_HOST_DEVICE inline float rsqrt_approx(float x) {
#ifdef __CUDA_ARCH__
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return 1.0f / std::sqrt(x);
#endif
}

}  // namespace protondose
