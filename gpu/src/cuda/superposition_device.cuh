#pragma once
// Device helpers shared by the superposition kernels of gpu/src/cuda: the
// pixel-integrated Gaussian weight in float (what every GPU path sums) and the
// float / fixed-point accumulation into the output.
#include <cuda_runtime.h>

#include <cstddef>

#include "convolution_kernels.cuh"
#include "protondose/gpu/gaussian_kernel.h"
#include "superposition_kernels.cuh"
#include "../wide_gaussian_series.h"

namespace protondose::cuda {

inline constexpr float kInvSqrt2 = 0.70710678118654752f;

/// 1 / (√2 σ), the argument scale of Eq. 4; 0 flags local deposition (σ ≈ 0).
__device__ inline float erf_scale(float sigma_px) {
  return sigma_px < kLocalDepositSigmaPx ? 0.0f : kInvSqrt2 / sigma_px;
}

/// K(d, σ) for d ≥ 0, with a = erf_scale(σ). Wide Gaussians (σ > 2.36 px)
/// from WideGaussianSeries: differences of erfc values near ½ cancel (a lone
/// pixel at σ = 75 px and 3σ came out 5.0·10⁻⁵ of its peak off, H100,
/// docs/benchmarks.md run 67). The others by erfc differences, which keep
/// the tail weights accurate in float (erf differences near 1 would
/// cancel), and the centre by erf.
__device__ inline float gaussian_weight(int d, float a) {
  if (a == 0.0f) return d == 0 ? 1.0f : 0.0f;
  if (a < WideGaussianSeries::kMaxScale) return WideGaussianSeries(a).weight(d);
  if (d == 0) return erff(0.5f * a);
  return 0.5f * (erfcf((d - 0.5f) * a) - erfcf((d + 0.5f) * a));
}

/// Adds `value` to output pixel `index`, in float or in fixed point.
__device__ inline void accumulate(const StackParams& p, std::size_t index, float value) {
  if (p.out_fixed)
    atomicAdd(p.out_fixed + index, to_fixed(value, *p.fixed_scale));
  else
    atomicAdd(p.out + index, value);
}

}  // namespace protondose::cuda
