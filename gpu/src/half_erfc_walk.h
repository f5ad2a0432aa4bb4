#pragma once
/// \file half_erfc_walk.h
/// The tensor-core scatter's weight tables walk ½·erfc from one table row to
/// the next (gpu/src/cuda/scatter_tensor_core.cu). Host and device, so that a
/// CPU test (tests/gpu/superposition_cpu_test.cpp) checks the walk's
/// weights against the exact ones where no GPU is.

#include <cmath>

#include "protondose/gpu/approx_math.h"
#include "protondose/gpu/gaussian_kernel.h"

namespace protondose {

/// ½·erfc((d + ½)·a) for d = 0, 1, 2, … in turn, the weight tables' one erfc
/// per pixel, axis and d: erfc(z) = t·Q(t)·exp(−z²) with t = 1/(1 + 0.39 z)
/// and Q of degree 5, fitted for this (least squares of the absolute error
/// over 3,000 points z ∈ [0, 6], reweighted 30 times toward the minimax,
/// 0.39 the best of p = 0.25 … 0.60: |error| ≤ 8.3·10⁻⁹ in exact arithmetic).
/// Walked from one d to the next without a product or a constant reloaded:
/// - 1 + 0.39 z grows by 0.39 a per d (one add; t's rcp.approx then reads it);
/// - exp(−z²) by two multiplications (z_{d+1}² − z_d² = (2d + 2)·a², so the
///   factor is exp(−2a²)^{d+1});
/// - Q's leading coefficient c₅ and the ½ of K(d) = ½[erfc − erfc] ride in
///   that Gaussian factor, so that Q is evaluated monic: t + b₄, then four
///   FFMA with one immediate each (b_i = c_i / c₅).
/// Per d: one rcp.approx and 10 more instructions (the unscaled walk took 14,
/// two of them reloading constants; the Numerical Recipes fit erfc =
/// t·exp(−z² + P(t)) an rcp, an ex2 and 14 more). In float (on the host,
/// σ 0.2–11 px; tests/gpu/superposition_cpu_test.cpp) the weights
/// K(0) = 1 − 2h₀, K(d) = h_{d−1} − h_d come within 3.7·10⁻⁷ of the exact
/// ones and Σ|ΔK| over a kernel within 2.2·10⁻⁶ (erfcf's K: 5.3·10⁻⁸). ftz: values
/// below 2⁻¹²⁶ are 0 (rcp_approx, exp2_approx: the GPU's MUFU, the host's
/// library functions in the CPU tests). a = 0 (σ ≈ 0: a local deposit) walks zeros.
class HalfErfcWalk {
 public:
  explicit PROTONDOSE_HOST_DEVICE HalfErfcWalk(float a) : w_(fmaf(kP, 0.5f * a, 1.0f)), w_step_(kP * a) {
    const float z = 0.5f * a;
    gauss_ = a == 0.0f ? 0.0f : 0.5f * kC5 * exp2_approx(-kLog2e * z * z);
    ratio_step_ = exp2_approx(-2.0f * kLog2e * a * a);
    ratio_ = ratio_step_;
  }
  /// ½·erfc at the current argument.
  PROTONDOSE_HOST_DEVICE float value() const {
    const float t = rcp_approx(w_);
    float q = t + kB4;
    q = fmaf(q, t, kB3);
    q = fmaf(q, t, kB2);
    q = fmaf(q, t, kB1);
    q = fmaf(q, t, kB0);
    return q * t * gauss_;
  }
  /// On to the next d.
  PROTONDOSE_HOST_DEVICE void advance() {
    w_ += w_step_;
    gauss_ *= ratio_;
    ratio_ *= ratio_step_;
  }

 private:
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kP = 0.39f;
  // Q(t) = c₅·(t⁵ + b₄t⁴ + … + b₀), c₅ = −0.22753774031.
  static constexpr float kC5 = -2.2753774031e-01f;
  static constexpr float kB4 = -3.8967904175e+00f, kB3 = 2.7925229856e+00f, kB2 = -2.8547470965e+00f,
                         kB1 = -4.0163486002e-01f, kB0 = -1.0342259274e+00f;
  float w_, w_step_, gauss_, ratio_, ratio_step_;
};

}  // namespace protondose
