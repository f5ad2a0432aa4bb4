#pragma once
// Test inputs for the superposition: random stacks with fixed, printed seeds,
// and the named edge cases of the oracle ladder.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/superposition.h"

/// Skips the test (or the fixture's SetUp) it stands in where no CUDA device
/// is present: CI builds and runs the GPU suites without one.
#define PROTONDOSE_SKIP_WITHOUT_GPU()                 \
  if (::protondose::gpu_device_count() != 0) {        \
  } else                                              \
    GTEST_SKIP() << "no CUDA device present (or built without CUDA): GPU test skipped"

namespace protondose::testing {

/// Owns the arrays of a stack and hands out a SuperpositionInput view.
struct Stack {
  std::string name;
  StackShape shape;
  std::vector<float> image, sigma_x, sigma_y;

  explicit Stack(std::string case_name, int slices, int rows, int cols)
      : name(std::move(case_name)), shape{slices, rows, cols},
        image(shape.pixel_count(), 0.0f), sigma_x(shape.pixel_count(), 0.0f),
        sigma_y(shape.pixel_count(), 0.0f) {}

  SuperpositionInput input() const {
    const std::size_t n = shape.pixel_count();
    return {shape, {image.data(), n}, {sigma_x.data(), n}, {sigma_y.data(), n}};
  }
  std::size_t index(int s, int y, int x) const {
    return (static_cast<std::size_t>(s) * shape.rows + y) * shape.cols + x;
  }
};

/// The paper's experiment: image uniform in [0, 1), σ uniform in [0, r_max/n_σ)
/// (isotropic unless anisotropic, then σy drawn independently).
inline Stack random_stack(const std::string& name, unsigned seed, int slices, int rows, int cols,
                          int r_max, bool anisotropic, double cutoff = 3.0) {
  Stack st(name + " (seed " + std::to_string(seed) + ")", slices, rows, cols);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(0.0f, 1.0f);
  // Strictly below r_max/n_σ so that ceil(n_σ·σ) <= r_max.
  std::uniform_real_distribution<float> sigma(0.0f, static_cast<float>(r_max / cutoff) * 0.9999f);
  for (std::size_t i = 0; i < st.image.size(); ++i) {
    st.image[i] = value(rng);
    st.sigma_x[i] = sigma(rng);
    st.sigma_y[i] = anisotropic ? sigma(rng) : st.sigma_x[i];
  }
  return st;
}

/// Max |a − b| over all pixels, and max |b| (the reference's maximum).
/// Slice s of the stack gets one σ pair on its non-zero pixels; the zero
/// pixels get other, varying σ (they carry no dose, so the slice stays uniform).
inline void make_slice_uniform(Stack& st, int s, float sigma_x, float sigma_y) {
  for (int y = 0; y < st.shape.rows; ++y)
    for (int x = 0; x < st.shape.cols; ++x) {
      const std::size_t i = st.index(s, y, x);
      const bool zero = st.image[i] == 0.0f;
      st.sigma_x[i] = zero ? 0.1f * (x % 7) : sigma_x;
      st.sigma_y[i] = zero ? 0.2f * (y % 5) : sigma_y;
    }
}

struct Difference {
  double max_abs = 0.0;
  double reference_max = 0.0;
  std::size_t worst_index = 0;
  double relative() const { return reference_max > 0 ? max_abs / reference_max : max_abs; }
};

template <class A, class B>
Difference compare(const std::vector<A>& test, const std::vector<B>& reference) {
  Difference d;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    d.reference_max = std::max(d.reference_max, std::abs(static_cast<double>(reference[i])));
    const double diff = std::abs(static_cast<double>(test[i]) - static_cast<double>(reference[i]));
    if (diff > d.max_abs) {
      d.max_abs = diff;
      d.worst_index = i;
    }
  }
  return d;
}

/// A GPU method with the options that change its paths: the parameter of
/// the suites that run every method and mode (slice summary, slice boxes).
struct MethodVariant {
  SuperpositionMethod method;
  bool deterministic;
  TileDispatch dispatch;
};

/// Every GPU method and the paths its options choose: the tensor cores in
/// both modes, the tile scatter launched from the host and from the device,
/// the register-blocked and atomic scatters, the gather. `bitwise`: where a
/// method's float mode differs from run to run (the device-launched tiles,
/// the atomic scatter), its deterministic mode instead, so that a suite can
/// compare outputs bitwise.
inline std::vector<MethodVariant> every_method_variant(bool bitwise) {
  return {{SuperpositionMethod::kGpuScatterTensorCore, false, TileDispatch::kFromHost},
          {SuperpositionMethod::kGpuScatterTensorCore, true, TileDispatch::kFromHost},
          {SuperpositionMethod::kGpuScatterTiled, false, TileDispatch::kFromHost},
          {SuperpositionMethod::kGpuScatterTiled, bitwise, TileDispatch::kFromDevice},
          {SuperpositionMethod::kGpuScatterRegisterBlocked, false, TileDispatch::kFromHost},
          {SuperpositionMethod::kGpuScatterAtomic, bitwise, TileDispatch::kFromHost},
          {SuperpositionMethod::kGpuGatherExact, false, TileDispatch::kFromHost}};
}

/// gtest name of a MethodVariant: "gpu_scatter_tiled_deterministic_device_dispatch".
template <class ParamInfo>
std::string method_variant_name(const ParamInfo& info) {
  std::string name = method_name(info.param.method);
  if (info.param.deterministic) name += "-deterministic";
  if (info.param.dispatch == TileDispatch::kFromDevice) name += "-device-dispatch";
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

/// gtest name of a parameterised method: "gpu-scatter-tiled" → "gpu_scatter_tiled".
template <class ParamInfo>
std::string method_test_name(const ParamInfo& info) {
  std::string name = method_name(info.param);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace protondose::testing
