#pragma once
/// \file gaussian_kernel.h
/// The pixel-integrated Gaussian weight of the kernel superposition, shared by
/// the CPU oracle and the CUDA kernels so that every backend cuts the kernel at
/// exactly the same radius.

#include <cmath>

#if defined(__CUDACC__)
#define PROTONDOSE_HOST_DEVICE __host__ __device__
#else
#define PROTONDOSE_HOST_DEVICE
#endif

namespace protondose {

/// σ below this (pixels) is treated as 0: the pixel deposits locally. At this
/// width the Gaussian puts < 1e-300 outside its own pixel.
inline constexpr float kLocalDepositSigmaPx = 1e-3f;

/// Cut-off radius in pixels, r = ceil(n_σ·σ), computed in float on every
/// backend (a float/double difference at an integer boundary would change r).
PROTONDOSE_HOST_DEVICE inline int gaussian_radius_px(float sigma_px, float cutoff_sigmas) {
  return sigma_px < kLocalDepositSigmaPx ? 0 : static_cast<int>(ceilf(cutoff_sigmas * sigma_px));
}

/// K(d, σ) = ½[erf((d+½)/(√2σ)) − erf((d−½)/(√2σ))] (da Silva et al., Eq. 4):
/// the fraction of a unit Gaussian centred on pixel 0 that falls in pixel d.
/// Double precision (the CPU oracle).
inline double pixel_integrated_gaussian(int d, double sigma_px) {
  if (sigma_px < kLocalDepositSigmaPx) return d == 0 ? 1.0 : 0.0;
  const double inv = 1.0 / (1.4142135623730951 * sigma_px);
  return 0.5 * (std::erf((d + 0.5) * inv) - std::erf((d - 0.5) * inv));
}

}  // namespace protondose
