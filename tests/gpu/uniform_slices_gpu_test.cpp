// Uniform-σ slices of a stack (SuperpositionOptions::separable_uniform_slices):
// the scatter paths run them as separable row/column passes. Checked against
// the CPU oracle (which always scatters), against the same method with the
// split switched off, and through DeviceSuperposer::last_split() for which
// slices took which path. Skips, with a message, when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/superposition.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

using testing::make_slice_uniform;
using testing::Stack;

constexpr double kTolerance = 1e-5;  // of max(O), as for every GPU method

/// Runs one method on device copies of the stack and keeps the split it reports.
/// The output starts as garbage, and the stack is superposed twice by the same
/// superposer: whatever the superposition does not write or clear itself (the
/// host-launched paths clear only the slices they scatter into; the
/// deterministic accumulator is reused) would show.
struct DeviceRun {
  std::vector<float> output;
  DeviceSuperposer::Split split;
};

DeviceRun run_on_device(SuperpositionMethod method, const Stack& st, const SuperpositionOptions& options) {
  const std::size_t n = st.shape.pixel_count();
  float* d = DeviceSuperposer::allocate_device_floats(4 * n);
  DeviceSuperposer::copy_to_device(d, st.image.data(), n);
  DeviceSuperposer::copy_to_device(d + n, st.sigma_x.data(), n);
  DeviceSuperposer::copy_to_device(d + 2 * n, st.sigma_y.data(), n);
  DeviceRun run;
  try {
    DeviceSuperposer device(method, options);
    const std::vector<float> garbage(n, 1.0e30f);
    for (int pass = 0; pass < 2; ++pass) {
      DeviceSuperposer::copy_to_device(d + 3 * n, garbage.data(), n);
      device.superpose_device({st.shape, {d, n}, {d + n, n}, {d + 2 * n, n}}, d + 3 * n);
    }
    run.split = device.last_split();
    run.output.resize(n);
    DeviceSuperposer::copy_to_host(run.output.data(), d + 3 * n, n);
  } catch (...) {
    DeviceSuperposer::free_device(d);
    throw;
  }
  DeviceSuperposer::free_device(d);
  return run;
}

class UniformSlices : public ::testing::TestWithParam<SuperpositionMethod> {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
  }

  /// The method with the split on matches the oracle and the method with the
  /// split off; returns the split of the run with it on.
  DeviceSuperposer::Split expect_exact(const Stack& st, SuperpositionOptions options = {}) {
    SCOPED_TRACE(st.name + " via " + method_name(GetParam()));
    const std::vector<double> reference = superpose_cpu_reference(st.input(), options);
    options.separable_uniform_slices = true;
    const DeviceRun split = run_on_device(GetParam(), st, options);
    options.separable_uniform_slices = false;
    const DeviceRun scatter = run_on_device(GetParam(), st, options);
    EXPECT_EQ(scatter.split.separable_slices, 0);
    const testing::Difference vs_oracle = testing::compare(split.output, reference);
    EXPECT_GT(vs_oracle.reference_max, 0.0) << "vacuous case: the reference is all zero";
    EXPECT_LE(vs_oracle.relative(), kTolerance) << "max |gpu - cpu| = " << vs_oracle.max_abs << " at index "
                                                << vs_oracle.worst_index << ", max(cpu) = " << vs_oracle.reference_max;
    const testing::Difference vs_scatter = testing::compare(split.output, scatter.output);
    EXPECT_LE(vs_scatter.relative(), kTolerance) << "separable vs scatter: max diff " << vs_scatter.max_abs;
    return split.split;
  }
};

TEST_P(UniformSlices, MixedStackSplitsExactlyTheUniformSlices) {
  // 6 slices: 0, 2, 5 uniform (2 anisotropic, 5 with σ = 0: local deposit);
  // 1 and 4 random σ; 3 uniform except one non-zero pixel one ulp wider.
  Stack st = testing::random_stack("mixed", 301u, 6, 45, 70, 9, true);
  for (std::size_t i = 0; i < st.image.size(); i += 3) st.image[i] = 0.0f;  // zero pixels with their own σ
  make_slice_uniform(st, 0, 1.7f, 1.7f);
  make_slice_uniform(st, 2, 2.9f, 0.8f);
  st.image[st.index(3, 20, 31)] = 0.5f;  // the odd pixel must carry dose
  make_slice_uniform(st, 3, 2.2f, 2.2f);
  make_slice_uniform(st, 5, 0.0f, 0.0f);
  st.sigma_x[st.index(3, 20, 31)] = std::nextafter(2.2f, 3.0f);
  const DeviceSuperposer::Split split = expect_exact(st);
  EXPECT_EQ(split.separable_slices, 3) << "slices 0, 2 and 5";
  // Slices 1, 3 and 4 scatter: 3 × 3 tiles of 32 × 16 px each on a 45 × 70 slice.
  EXPECT_EQ(split.scatter_tiles, 3 * 3 * 3);
}

TEST_P(UniformSlices, RadiiBeyondTheTileTemplatesAndAtTheLimit) {
  // r = 60 (the scatter's general atomics path) and r = 256 (kMaxKernelRadiusPx).
  Stack st = testing::random_stack("wide kernels", 302u, 2, 40, 300, 1, false);
  make_slice_uniform(st, 0, 20.0f, 19.5f);
  make_slice_uniform(st, 1, 85.0f, 85.0f);  // ceil(3 · 85) = 255
  EXPECT_EQ(expect_exact(st).separable_slices, 2);
}

TEST_P(UniformSlices, HotPixelsOnTheBordersLoseTheSameMassAsTheScatter) {
  Stack st("hot border pixels", 2, 33, 47);
  st.image[st.index(0, 0, 0)] = 5.0f;
  st.image[st.index(0, 32, 46)] = 1.0f;
  st.image[st.index(1, 16, 0)] = 2.0f;
  std::fill(st.sigma_x.begin(), st.sigma_x.end(), 3.3f);
  std::fill(st.sigma_y.begin(), st.sigma_y.end(), 4.1f);
  EXPECT_EQ(expect_exact(st).separable_slices, 2);
}

TEST_P(UniformSlices, DeterministicModeStaysBitwiseReproducible) {
  Stack st = testing::random_stack("deterministic, half uniform", 303u, 4, 64, 64, 8, true);
  make_slice_uniform(st, 1, 2.5f, 2.5f);
  make_slice_uniform(st, 3, 1.2f, 2.0f);
  SuperpositionOptions options;
  options.deterministic = true;
  EXPECT_EQ(expect_exact(st, options).separable_slices, 2);
  const DeviceRun first = run_on_device(GetParam(), st, options);
  for (int repeat = 0; repeat < 3; ++repeat) {
    const DeviceRun again = run_on_device(GetParam(), st, options);
    ASSERT_EQ(0, std::memcmp(first.output.data(), again.output.data(), first.output.size() * sizeof(float)))
        << "run " << repeat + 2 << " differs";
  }
}

TEST_P(UniformSlices, LongRowsAndColumnsAtTheLargestRadius) {
  // 12,000-pixel rows (many row segments per row), and a tall slice whose
  // column pass needs its shared-memory tile at r = 256 (beyond 48 KiB).
  Stack st("12,000-pixel rows; 600 rows at r 256", 2, 600, 12000);
  for (std::size_t i = 0; i < st.image.size(); i += 997) st.image[i] = 1.0f + static_cast<float>(i % 5);
  for (int y = 0; y < st.shape.rows; ++y)
    for (int x = 0; x < st.shape.cols; ++x) {
      st.sigma_x[st.index(0, y, x)] = 2.0f;
      st.sigma_y[st.index(0, y, x)] = 0.7f;
      st.sigma_x[st.index(1, y, x)] = 1.0f;
      st.sigma_y[st.index(1, y, x)] = 85.3f;  // ceil(3 · 85.3) = 256
    }
  EXPECT_EQ(expect_exact(st).separable_slices, 2);
}

INSTANTIATE_TEST_SUITE_P(HostLaunchedScatters, UniformSlices,
                         ::testing::Values(SuperpositionMethod::kGpuScatterTiled,
                                           SuperpositionMethod::kGpuScatterRegisterBlocked,
                                           SuperpositionMethod::kGpuScatterTensorCore),
                         testing::method_test_name<::testing::TestParamInfo<SuperpositionMethod>>);

TEST(UniformSlicesDeviceDispatch, TheDeviceLaunchedTileScatterNeverSplits) {
  PROTONDOSE_SKIP_WITHOUT_GPU();
  Stack st = testing::random_stack("uniform, device-launched", 304u, 3, 40, 40, 1, false);
  for (int s = 0; s < 3; ++s) make_slice_uniform(st, s, 1.5f + s, 1.5f + s);
  SuperpositionOptions options;
  options.tile_dispatch = TileDispatch::kFromDevice;
  const DeviceRun run = run_on_device(SuperpositionMethod::kGpuScatterTiled, st, options);
  EXPECT_EQ(run.split.separable_slices, 0);
  const testing::Difference d = testing::compare(run.output, superpose_cpu_reference(st.input(), options));
  EXPECT_LE(d.relative(), kTolerance) << d.max_abs;
}

}  // namespace
}  // namespace protondose
