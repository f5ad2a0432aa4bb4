#pragma once
/// \file wide_gaussian_series.h
/// The pixel-integrated Gaussian weights of a wide Gaussian in float, without
/// differences of erf. Host and device: the GPU kernels take them (the tile
/// scatters' gaussian_weight, the tensor cores' weight tables), and a CPU test
/// (tests/gpu/superposition_cpu_test.cpp) checks them against the exact ones.

#include <cmath>

#include "protondose/gpu/approx_math.h"
#include "protondose/gpu/gaussian_kernel.h"

namespace protondose {

/// K(d, σ) = ½[erf((d + ½)a) − erf((d − ½)a)], a = 1/(√2σ), for small a.
///
/// Why: K(d) as a difference of two erf (or erfc) values loses what the two
/// share. For a wide Gaussian both are near ½, where a float resolves
/// 3·10⁻⁸, while K(0) ≈ a/√π is small: at σ = 10 px (a = 0.07) a weight is
/// off by up to 2·10⁻⁶ of K(0), at σ = 80 px by 10⁻⁵, and a lone pixel's
/// output — the single product K(dy)·K(dx) — by twice that, over the
/// superposition's tolerance of 10⁻⁵: on an H100 every GPU method put a lone
/// pixel at σ = 75 px and 3σ 5.0·10⁻⁵ of its peak off the oracle
/// (docs/benchmarks.md run 67; a host emulation with the host's erfcf,
/// 1.5·10⁻⁵; of the tensor cores' walked erfc, HalfErfcWalk, 1.1–1.5·10⁻⁵
/// at σ ≈ 9.5–10 px).
///
/// Instead, the pixel's integral expanded about its centre c = d·a:
///   K(d) = (a/√π)·e^{−c²}·[1 + a²(2c² − 1)/12 + a⁴(4c⁴ − 12c² + 3)/480 + O(a⁶)],
/// each weight a product with no cancellation. For a < kMaxScale (σ > 2.36 px)
/// every weight out to 10σ (and to 256 px) is within 4·10⁻⁷ of K(0) of the
/// exact one, and a lone pixel's output within 7·10⁻⁷ of its peak (host, float).
/// Per d: two multiplications for u = c²·log₂e, ex2, two FFMA for the
/// bracket (a polynomial in u whose coefficients are the pixel's), two
/// multiplications — against 13 for a step of the erfc walk (on the depth
/// stack, 8–10 % of the RB 2 tensor-core kernels' instructions; run 67).
class WideGaussianSeries {
 public:
  /// The largest scale a = 1/(√2σ) the series is used for: σ > 2.36 px.
  /// (At a ≤ 0.35 the lone pixel's error is 1.5·10⁻⁶, at 0.5 1.2·10⁻⁵.)
  static constexpr float kMaxScale = 0.3f;

  explicit PROTONDOSE_HOST_DEVICE WideGaussianSeries(float a)
      : scaled_a_(a * kSqrtLog2e), prefactor_(a * kInvSqrtPi) {
    const float a2 = a * a;
    // 1 + a²(2c² − 1)/12 + a⁴(4c⁴ − 12c² + 3)/480 with c² = u / log₂e.
    b0_ = 1.0f + a2 * (-1.0f / 12.0f + a2 * (1.0f / 160.0f));
    b1_ = a2 * (1.0f / (6.0f * kLog2e) - a2 * (1.0f / (40.0f * kLog2e)));
    b2_ = a2 * a2 * (1.0f / (120.0f * kLog2e * kLog2e));
  }
  /// K(d) for d ≥ 0.
  PROTONDOSE_HOST_DEVICE float weight(int d) const {
    const float c = static_cast<float>(d) * scaled_a_, u = c * c;
    return prefactor_ * exp2_approx(-u) * fmaf(fmaf(b2_, u, b1_), u, b0_);
  }
  /// K(0): the centre pixel's weight.
  PROTONDOSE_HOST_DEVICE float centre_weight() const { return prefactor_ * b0_; }

 private:
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kSqrtLog2e = 1.2011224087864498f;
  static constexpr float kInvSqrtPi = 0.56418958354775628f;
  float scaled_a_, prefactor_, b0_, b1_, b2_;
};

}  // namespace protondose
