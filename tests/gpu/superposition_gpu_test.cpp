// The GPU methods against the CPU oracle (and the scatter against the exact
// gather): the oracle ladder on named edge cases and random stacks with fixed,
// printed seeds. Skips, with a message, when no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "protondose/gpu/superposition.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

using testing::Stack;

// GPU vs CPU: float against double, tolerance of the issue: 1e-5 of max(O).
constexpr double kTolerance = 1e-5;

class GpuSuperposition : public ::testing::TestWithParam<SuperpositionMethod> {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
  }

  std::vector<float> run(const Stack& st, SuperpositionOptions options = {}) {
    std::vector<float> out(st.shape.pixel_count(), -1.0f);
    make_superposer(GetParam(), options)->superpose(st.input(), out.data());
    return out;
  }

  void expect_matches_oracle(const Stack& st, SuperpositionOptions options = {}) {
    SCOPED_TRACE(st.name + " via " + method_name(GetParam()));
    const std::vector<double> reference = superpose_cpu_reference(st.input(), options);
    const std::vector<float> gpu = run(st, options);
    const testing::Difference d = testing::compare(gpu, reference);
    ASSERT_GT(d.reference_max, 0.0) << "vacuous case: the reference is all zero";
    // The error itself, in --gtest_output=xml (the largest of the test's cases).
    worst_relative_error_ = std::max(worst_relative_error_, d.relative());
    RecordProperty("max_relative_error", ::testing::PrintToString(worst_relative_error_));
    EXPECT_LE(d.relative(), kTolerance)
        << "max |gpu - cpu| = " << d.max_abs << " at index " << d.worst_index
        << ", max(cpu) = " << d.reference_max;
  }

  /// Deterministic mode: four runs bitwise the same, and within the tolerance of the oracle.
  void expect_deterministic_mode_reproducible(const Stack& st) {
    SuperpositionOptions options;
    options.deterministic = true;
    const std::vector<float> first = run(st, options);
    for (int repeat = 0; repeat < 3; ++repeat) {
      const std::vector<float> again = run(st, options);
      ASSERT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * sizeof(float)))
          << st.name << " via " << method_name(GetParam()) << ": run " << repeat + 2 << " differs";
    }
    expect_matches_oracle(st, options);
  }

 private:
  double worst_relative_error_ = 0.0;  ///< over the test's expect_matches_oracle calls
};

TEST_P(GpuSuperposition, SizesThatAreNotMultiplesOfTheTile) {
  expect_matches_oracle(testing::random_stack("37 x 45", 101u, 1, 37, 45, 5, true));
  expect_matches_oracle(testing::random_stack("1 x 1", 102u, 1, 1, 1, 2, false));
  expect_matches_oracle(testing::random_stack("3 x 100", 103u, 2, 3, 100, 7, true));
}

TEST_P(GpuSuperposition, SigmaBelowAPixel) {
  expect_matches_oracle(testing::random_stack("sigma < 1/3 px", 104u, 2, 40, 50, 1, true));
}

TEST_P(GpuSuperposition, EveryTileRadiusFromOneToTheTopOfTheRange) {
  for (int r_max = 1; r_max <= kMaxTileRadiusPx; ++r_max)
    expect_matches_oracle(testing::random_stack("r_max " + std::to_string(r_max),
                                                1000u + r_max, 1, 48, 40, r_max, true));
}

TEST_P(GpuSuperposition, RadiusBeyondTheLargestTemplateUsesTheGeneralPath) {
  // r up to 60 px: tiles above kMaxTileRadiusPx go to the global-atomics path.
  expect_matches_oracle(testing::random_stack("r_max 60", 105u, 1, 90, 100, 60, false));
}

TEST_P(GpuSuperposition, AnisotropicSigma) {
  Stack st = testing::random_stack("sigma_x = 3 sigma_y", 106u, 2, 64, 64, 12, false);
  for (std::size_t i = 0; i < st.sigma_y.size(); ++i) st.sigma_y[i] = st.sigma_x[i] / 3.0f;
  expect_matches_oracle(st);
}

/// The lone pixel of slice s: off the tile grid in both axes, so that no
/// kernel's blocks line up with it.
std::size_t lone_pixel_index(const Stack& st, int s) {
  return st.index(s, st.shape.rows / 2 - 3, st.shape.cols / 2 + 5);
}

/// One lone pixel per slice, slice s at widths sigma_px[s] (σx = σy), valued
/// so that every slice peaks at 1: the tolerance is relative to the stack's
/// maximum, and a narrow slice's peak would otherwise hide a wide slice's
/// error. A lone pixel is the float weights' hardest case: its output is the
/// single product K(dy)·K(dx), which no neighbour's error averages out; and a
/// wide Gaussian's weights are differences of erf values near ½.
Stack lone_pixels_of_widths(const std::string& name, const std::vector<float>& sigma_px, int side) {
  Stack st(name, static_cast<int>(sigma_px.size()), side, side);
  for (int s = 0; s < st.shape.slices; ++s) {
    const double k0 = pixel_integrated_gaussian(0, sigma_px[s]);
    st.image[lone_pixel_index(st, s)] = static_cast<float>(1.0 / (k0 * k0));
    std::fill(st.sigma_x.begin() + st.index(s, 0, 0), st.sigma_x.begin() + st.index(s + 1, 0, 0), sigma_px[s]);
    std::fill(st.sigma_y.begin() + st.index(s, 0, 0), st.sigma_y.begin() + st.index(s + 1, 0, 0), sigma_px[s]);
  }
  return st;
}

TEST_P(GpuSuperposition, LonePixelsOfEveryTileWidthAtTheDefaultCutOff) {
  // σ up to 10.66 px: radii up to 32 at 3σ, the tile kernels' (and the
  // tensor cores') whole range, densest where the widest classes are.
  std::vector<float> sigma_px;
  for (float s = 0.5f; s < 6.0f; s += 0.5f) sigma_px.push_back(s);
  for (float s = 6.0f; s < 10.66f; s += 0.2f) sigma_px.push_back(s);
  sigma_px.push_back(10.66f);
  const Stack st = lone_pixels_of_widths("lone pixels, sigma 0.5 ... 10.66 px", sigma_px, 80);
  SuperpositionOptions scattered;
  scattered.separable_uniform_slices = false;  // the tile kernels, not the separable passes
  expect_matches_oracle(st, scattered);
  expect_matches_oracle(st);  // each slice uniform: the separable passes, where the method has them
}

/// Wide lone pixels (σ from `from_px` below `to_px` in steps of 0.05 px),
/// each with a faint narrow pixel (σ 0.5 px) beside it in the same row of a
/// tile: a mixed warp in the tensor cores' tables, where the wide ones walk
/// erfc up to 6 px and take the series from there.
Stack wide_lone_pixels_beside_narrow_ones(float from_px, float to_px) {
  std::vector<float> sigma_px;
  for (float s = from_px; s < to_px; s += 0.05f) sigma_px.push_back(s);
  Stack st = lone_pixels_of_widths("wide lone pixels beside a narrow one", sigma_px, 80);
  for (int s = 0; s < st.shape.slices; ++s) {
    const std::size_t beside = lone_pixel_index(st, s) + 1;  // the next column, same tile row
    st.image[beside] = 0.01f;
    st.sigma_x[beside] = st.sigma_y[beside] = 0.5f;
  }
  return st;
}

TEST_P(GpuSuperposition, WideLonePixelsBesideANarrowOneUpTo6Px) {
  // On the walk, up to 6.6e-6 of the peak (H100, docs/benchmarks.md runs 67–68).
  SuperpositionOptions scattered;
  scattered.separable_uniform_slices = false;
  expect_matches_oracle(wide_lone_pixels_beside_narrow_ones(2.4f, 6.0f), scattered);
}

TEST_P(GpuSuperposition, WideLonePixelsBesideANarrowOneFrom6Px) {
  // The walk put these up to 1.5e-5 of the peak off from σ ≈ 7 px (run 67);
  // the series in the wide lanes: run 68.
  SuperpositionOptions scattered;
  scattered.separable_uniform_slices = false;
  expect_matches_oracle(wide_lone_pixels_beside_narrow_ones(6.0f, 10.66f), scattered);
}

TEST_P(GpuSuperposition, MixedWarpsAtOtherCutOffs) {
  // Warps with narrow pixels (σ < 2.36 px) and wide ones over 6 px take the
  // series for the wide ones and walk the narrow ones: at 3.5σ and 4.5σ to
  // r = 9 and 11, past the 8 px of the default 3σ that the walk unrolls; at
  // 2.5σ, 1.5σ and 1.2σ in the classes up to R' = 16, 12 and 8, which meet
  // such warps only below 3σ (σ up to r_max / cut-off: 9.1, 7.1, 6.4, 8 and
  // 6.7 px). Bright everywhere, so that every pixel counts.
  const struct {
    double cutoff;
    int r_max;
  } cases[] = {{3.5, 32}, {4.5, 32}, {2.5, 16}, {1.5, 12}, {1.2, 8}};
  for (const auto& c : cases) {
    SuperpositionOptions options;
    options.cutoff_sigmas = c.cutoff;
    options.separable_uniform_slices = false;
    const std::string name = "r_max " + std::to_string(c.r_max) + " at " + std::to_string(c.cutoff) + " sigma";
    const unsigned seed = 2000u + static_cast<unsigned>(10 * c.cutoff) * 100u + static_cast<unsigned>(c.r_max);
    expect_matches_oracle(testing::random_stack(name, seed, 2, 64, 64, c.r_max, true, c.cutoff), options);
  }
}

TEST_P(GpuSuperposition, LonePixelsWiderThanTheTileKernels) {
  // σ 11 … 85 px: radii 33 … 256 at 3σ, the general path (global atomics);
  // the plane clips the widest kernels.
  const Stack st = lone_pixels_of_widths("lone pixels, sigma 11 ... 85 px",
                                         {11.0f, 20.0f, 40.0f, 60.0f, 75.0f, 79.0f, 85.0f}, 160);
  SuperpositionOptions scattered;
  scattered.separable_uniform_slices = false;
  expect_matches_oracle(st, scattered);
}

TEST_P(GpuSuperposition, OneHotPixelAtTheBorderAndAllZeroTiles) {
  Stack st("hot pixels on the borders, zero elsewhere", 3, 70, 90);
  std::fill(st.sigma_x.begin(), st.sigma_x.end(), 2.5f);
  std::fill(st.sigma_y.begin(), st.sigma_y.end(), 1.5f);
  st.image[st.index(0, 0, 0)] = 1.0f;
  st.image[st.index(1, 69, 89)] = 3.0f;
  st.image[st.index(2, 35, 0)] = 2.0f;
  expect_matches_oracle(st);
}

TEST_P(GpuSuperposition, ZeroSigmaIsIdentity) {
  Stack st = testing::random_stack("identity", 107u, 2, 33, 35, 1, false);
  std::fill(st.sigma_x.begin(), st.sigma_x.end(), 0.0f);
  std::fill(st.sigma_y.begin(), st.sigma_y.end(), 0.0f);
  const std::vector<float> out = run(st);
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], st.image[i]) << i;
}

TEST_P(GpuSuperposition, BatchOfSlicesWithSigmaGrowingWithDepth) {
  // The dose engine's shape: σ grows from 0.5 to 6 px with depth.
  Stack st = testing::random_stack("depth stack", 108u, 12, 48, 48, 1, false);
  for (int s = 0; s < 12; ++s)
    for (std::size_t i = 0; i < 48 * 48; ++i) {
      const float sigma = 0.5f + 5.5f * s / 11.0f;
      st.sigma_x[s * 48 * 48 + i] = sigma;
      st.sigma_y[s * 48 * 48 + i] = 0.8f * sigma;
    }
  expect_matches_oracle(st);
}

TEST_P(GpuSuperposition, DeterministicModeIsBitwiseReproducible) {
  const Stack st = testing::random_stack("determinism", 109u, 4, 96, 96, 10, true);
  expect_deterministic_mode_reproducible(st);
}

TEST_P(GpuSuperposition, BucketsOfManyRadiiBesideUniformSlicesInOneStack) {
  // The host-launched paths spread their buckets over side streams, beside
  // the uniform slices' separable passes on the superposer's own stream:
  // sixteen slices of one radius band each (r 2 … 47, the general bucket
  // included) and four uniform slices must all be summed before the output
  // is read, in float and bitwise-reproducibly in fixed point.
  testing::Stack st("many radii and uniform slices", 20, 40, 70);
  std::mt19937 rng(110u);
  std::uniform_real_distribution<float> value(0.0f, 1.0f);
  for (int s = 0; s < 16; ++s) {
    std::uniform_real_distribution<float> sigma(0.0f, (2.0f + 3.0f * s) / 3.0f * 0.9999f);
    for (int y = 0; y < 40; ++y)
      for (int x = 0; x < 70; ++x) {
        const std::size_t i = st.index(s, y, x);
        st.image[i] = value(rng);
        st.sigma_x[i] = sigma(rng);
        st.sigma_y[i] = sigma(rng);
      }
  }
  for (int s = 16; s < 20; ++s) {
    for (int y = 0; y < 40; ++y)
      for (int x = 0; x < 70; ++x) st.image[st.index(s, y, x)] = value(rng);
    testing::make_slice_uniform(st, s, 0.4f + 1.1f * (s - 16), 0.7f + 0.9f * (s - 16));
  }
  expect_matches_oracle(st);
  expect_deterministic_mode_reproducible(st);
}

TEST_P(GpuSuperposition, RejectsInvalidInputOnTheHostBeforeLaunching) {
  Stack st("nan sigma", 1, 8, 8);
  st.sigma_x[9] = std::nanf("");
  std::vector<float> out(64);
  EXPECT_THROW(make_superposer(GetParam())->superpose(st.input(), out.data()), InputError);
}

INSTANTIATE_TEST_SUITE_P(AllGpuMethods, GpuSuperposition,
                         ::testing::Values(SuperpositionMethod::kGpuGatherExact,
                                           SuperpositionMethod::kGpuScatterAtomic,
                                           SuperpositionMethod::kGpuScatterTiled,
                                           SuperpositionMethod::kGpuScatterRegisterBlocked,
                                           SuperpositionMethod::kGpuScatterTensorCore),
                         testing::method_test_name<::testing::TestParamInfo<SuperpositionMethod>>);

class DeviceSuperposerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
  }
};

TEST_F(DeviceSuperposerTest, DetectsInvalidPixelsOnTheDeviceAndNamesThem) {
  Stack st("device-side validation", 2, 20, 20);
  st.image[st.index(1, 4, 7)] = 1.0f;
  st.sigma_y[st.index(1, 4, 7)] = -2.0f;
  const std::size_t n = st.shape.pixel_count();
  float* d = DeviceSuperposer::allocate_device_floats(4 * n);
  DeviceSuperposer::copy_to_device(d, st.image.data(), n);
  DeviceSuperposer::copy_to_device(d + n, st.sigma_x.data(), n);
  DeviceSuperposer::copy_to_device(d + 2 * n, st.sigma_y.data(), n);
  DeviceSuperposer device(SuperpositionMethod::kGpuScatterTiled);
  try {
    device.superpose_device({st.shape, {d, n}, {d + n, n}, {d + 2 * n, n}}, d + 3 * n);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("slice 1, row 4, col 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sigma_y -2 px"), std::string::npos) << e.what();
  }
  DeviceSuperposer::free_device(d);
}

TEST_F(DeviceSuperposerTest, ScatterAgreesWithGatherOnALargeBatch) {
  // The second rung of the ladder: the GPU gather is the scatter's oracle on
  // stacks too large for a quick CPU run.
  const Stack st = testing::random_stack("64 x 128 x 128", 110u, 64, 128, 128, 12, true);
  std::vector<float> gather(st.shape.pixel_count()), scatter(st.shape.pixel_count());
  make_superposer(SuperpositionMethod::kGpuGatherExact)->superpose(st.input(), gather.data());
  make_superposer(SuperpositionMethod::kGpuScatterTiled)->superpose(st.input(), scatter.data());
  const testing::Difference d = testing::compare(scatter, gather);
  ASSERT_GT(d.reference_max, 0.0);
  EXPECT_LE(d.relative(), kTolerance) << "max |scatter - gather| = " << d.max_abs;
}

TEST(GpuAvailability, CpuOnlyBuildsReportNoDeviceAndRefuseGpuMethods) {
  if (built_with_cuda()) GTEST_SKIP() << "built with CUDA: the CPU-only behaviour is not testable here";
  EXPECT_EQ(gpu_device_count(), 0);
  try {
    make_superposer(SuperpositionMethod::kGpuScatterTiled);
    FAIL() << "expected UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos);
  }
}

}  // namespace
}  // namespace protondose

#include "protondose/gpu/separable_convolution.h"

namespace protondose {
namespace {

class GpuConvolution : public ::testing::TestWithParam<ConvolutionMethod> {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
  }
};

TEST_P(GpuConvolution, MatchesTheCpuTwinForUniformSigma) {
  const bool per_slice = GetParam() == ConvolutionMethod::kGpuSeparable;
  for (float sigma : {0.0f, 0.3f, 1.7f, 5.0f, 10.5f}) {
    const int slices = 3;
    testing::Stack st = testing::random_stack("uniform sigma " + std::to_string(sigma), 200u, slices, 70, 83, 1, false);
    std::vector<float> sx(slices), sy(slices);
    for (int s = 0; s < slices; ++s) {  // per-slice σ only where the method supports it
      sx[s] = per_slice ? sigma * (1.0f + 0.3f * s) : sigma;
      sy[s] = 0.6f * sx[s];
    }
    const UniformSigmaInput input{st.shape, st.input().image, {sx.data(), sx.size()}, {sy.data(), sy.size()}};
    const std::vector<double> reference = convolve_separable_cpu(input);
    std::vector<float> gpu(st.shape.pixel_count(), -1.0f);
    make_convolver(GetParam())->convolve(input, gpu.data());
    const testing::Difference d = testing::compare(gpu, reference);
    ASSERT_GT(d.reference_max, 0.0);
    EXPECT_LE(d.relative(), kTolerance) << st.name << " via " << method_name(GetParam())
                                        << ": max diff " << d.max_abs;
  }
}

TEST_P(GpuConvolution, OddShapesAndRadiiWiderThanThePlane) {
  // The separable row pass takes whole rows, several per block, in groups of 4
  // outputs (tails of 1–3), with taps rounded up to 4 (zero weights); the column
  // pass 8 rows per thread (tails here too). Planes narrower than a warp or the
  // kernel, one-pixel rows and columns, several row and column tiles, and radii
  // 0 and 32 beside 6 and 13 in one stack.
  const bool per_slice = GetParam() == ConvolutionMethod::kGpuSeparable;
  const int shapes[][2] = {{1, 1}, {1, 50}, {50, 1}, {5, 7}, {37, 53}, {130, 29}, {20, 36}};
  for (const auto& shape : shapes) {
    const int slices = 4;
    testing::Stack st = testing::random_stack(std::to_string(shape[0]) + " x " + std::to_string(shape[1]),
                                              210u + shape[0] + shape[1], slices, shape[0], shape[1], 1, false);
    const float sigmas[slices] = {0.0f, 10.5f, 1.7f, 4.2f};  // r = 0, 32, 6, 13 px
    std::vector<float> sx(slices), sy(slices);
    for (int s = 0; s < slices; ++s) {  // per-slice σ only where the method supports it
      sx[s] = per_slice ? sigmas[s] : 4.2f;
      sy[s] = per_slice ? sigmas[(s + 1) % slices] : 1.7f;
    }
    const UniformSigmaInput input{st.shape, st.input().image, {sx.data(), sx.size()}, {sy.data(), sy.size()}};
    const std::vector<double> reference = convolve_separable_cpu(input);
    std::vector<float> gpu(st.shape.pixel_count(), -1.0f);
    make_convolver(GetParam())->convolve(input, gpu.data());
    const testing::Difference d = testing::compare(gpu, reference);
    ASSERT_GT(d.reference_max, 0.0) << st.name;
    EXPECT_LE(d.relative(), kTolerance) << st.name << " via " << method_name(GetParam()) << ": max diff " << d.max_abs
                                        << " at index " << d.worst_index;
  }
}

INSTANTIATE_TEST_SUITE_P(AllGpuConvolutions, GpuConvolution,
                         ::testing::Values(ConvolutionMethod::kGpuSeparable, ConvolutionMethod::kGpuDirectGlobal,
                                           ConvolutionMethod::kGpuDirectConstant,
                                           ConvolutionMethod::kGpuDirectSharedTile),
                         testing::method_test_name<::testing::TestParamInfo<ConvolutionMethod>>);

}  // namespace
}  // namespace protondose

namespace protondose {
namespace {

// The tile kernels launched from the host instead of the device dispatcher: the
// same kernels, reachable by compute-sanitizer racecheck (which cannot follow
// device-side launches), and the same result.
TEST(GpuTiledHostDispatch, EveryRadiusMatchesTheOracle) {
  PROTONDOSE_SKIP_WITHOUT_GPU();
  SuperpositionOptions options;
  options.tile_dispatch = TileDispatch::kFromHost;
  for (int r_max : {1, 3, 8, 12, 13, 20, 32, 40}) {
    const testing::Stack st = testing::random_stack("host dispatch r_max " + std::to_string(r_max),
                                                    3000u + r_max, 2, 40, 70, r_max, true);
    for (bool deterministic : {false, true}) {
      options.deterministic = deterministic;
      std::vector<float> gpu(st.shape.pixel_count(), -1.0f);
      make_superposer(SuperpositionMethod::kGpuScatterTiled, options)->superpose(st.input(), gpu.data());
      const testing::Difference d = testing::compare(gpu, superpose_cpu_reference(st.input(), options));
      ASSERT_GT(d.reference_max, 0.0);
      EXPECT_LE(d.relative(), kTolerance) << st.name << (deterministic ? " deterministic" : "");
    }
  }
}

}  // namespace
}  // namespace protondose

namespace protondose {
namespace {

TEST(GpuConvolutionValidation, DirectDesignsNeedOneSigmaAndAKernelThatFitsConstantMemory) {
  PROTONDOSE_SKIP_WITHOUT_GPU();
  const std::vector<float> image(2 * 16 * 16, 1.0f);
  const std::vector<float> differing{1.0f, 2.0f}, wide{30.0f, 30.0f};  // r = 90 px > 63
  std::vector<float> out(image.size());
  UniformSigmaInput input{{2, 16, 16}, {image.data(), image.size()}, {differing.data(), 2}, {differing.data(), 2}};
  try {
    make_convolver(ConvolutionMethod::kGpuDirectConstant)->convolve(input, out.data());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("needs one sigma for the whole stack; slice 1 differs"), std::string::npos)
        << e.what();
  }
  input.sigma_x_px = {wide.data(), 2};
  input.sigma_y_px = {wide.data(), 2};
  try {
    make_convolver(ConvolutionMethod::kGpuDirectSharedTile)->convolve(input, out.data());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("supports radii up to 63 px; this stack needs 90"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace protondose

namespace protondose {
namespace {

TEST(GpuDeviceSelection, ADeviceIndexWithNoDeviceIsAnUnavailableErrorNamingIt) {
  const int count = gpu_device_count();
  if (count == 0) GTEST_SKIP() << "no CUDA device present (or built without CUDA): GPU test skipped";
  SuperpositionOptions options;
  options.gpu_device = count;  // one past the last device
  try {
    make_superposer(SuperpositionMethod::kGpuScatterTiled, options);
    FAIL() << "expected UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device " + std::to_string(count) + " does not exist"),
              std::string::npos)
        << e.what();
  }
  // Device memory is allocated on a named device, and one that does not exist is named too.
  try {
    DeviceSuperposer::allocate_device_floats(16, count);
    FAIL() << "expected UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("allocate_device_floats: CUDA device " + std::to_string(count) +
                                         " does not exist"),
              std::string::npos)
        << e.what();
  }
  // The last device exists and computes the same as the oracle.
  options.gpu_device = count - 1;
  const testing::Stack st = testing::random_stack("last device", 4000u, 1, 40, 50, 6, true);
  std::vector<float> gpu(st.shape.pixel_count());
  make_superposer(SuperpositionMethod::kGpuScatterTiled, options)->superpose(st.input(), gpu.data());
  const testing::Difference d = testing::compare(gpu, superpose_cpu_reference(st.input()));
  ASSERT_GT(d.reference_max, 0.0);
  EXPECT_LE(d.relative(), kTolerance);
}

}  // namespace
}  // namespace protondose

namespace protondose {
namespace {

// The tensor-core scatter with the crossover at 1 px: every bucket radius runs
// on the tensor cores (the default leaves the smallest to the tile scatter),
// so every radius class (R ≤ 8, 16, 24, 32) and every tile radius is checked.
class GpuTensorCoreEveryRadius : public ::testing::Test {
 protected:
  void SetUp() override {
    PROTONDOSE_SKIP_WITHOUT_GPU();
    options_.tensor_core_min_radius_px = 1;
  }
  void expect_matches_oracle(const testing::Stack& st) {
    std::vector<float> gpu(st.shape.pixel_count(), -1.0f);
    make_superposer(SuperpositionMethod::kGpuScatterTensorCore, options_)->superpose(st.input(), gpu.data());
    const testing::Difference d = testing::compare(gpu, superpose_cpu_reference(st.input(), options_));
    ASSERT_GT(d.reference_max, 0.0) << st.name;
    EXPECT_LE(d.relative(), kTolerance) << st.name << ": max |gpu - cpu| = " << d.max_abs << " at index "
                                        << d.worst_index << ", max(cpu) = " << d.reference_max;
  }
  SuperpositionOptions options_;
};

TEST_F(GpuTensorCoreEveryRadius, EveryTileRadiusAnisotropicAndOffTheTileGrid) {
  for (int r_max = 1; r_max <= kMaxTileRadiusPx; ++r_max)
    expect_matches_oracle(testing::random_stack("tensor cores, r_max " + std::to_string(r_max), 5000u + r_max, 2,
                                                45, 70, r_max, true));
}

TEST_F(GpuTensorCoreEveryRadius, EveryTileRadiusIsotropicBothRowAlignments) {
  // σx == σy in every warp: both weight tables from one erfc loop. 70 columns:
  // output rows start at every 8-byte offset, so the flush's quads take the
  // vector atomic and the per-cell fallback; 64 columns: every quad aligned.
  for (int r_max = 1; r_max <= kMaxTileRadiusPx; ++r_max)
    for (int cols : {70, 64})
      expect_matches_oracle(testing::random_stack("tensor cores, isotropic, r_max " + std::to_string(r_max) + ", " +
                                                      std::to_string(cols) + " columns",
                                                  5300u + r_max, 2, 45, cols, r_max, false));
}

TEST_F(GpuTensorCoreEveryRadius, IsotropicWarpsGiveTheGeneralPathsTablesBitwise) {
  // The same image twice, σy = σx everywhere, except that in `general` the
  // zero pixel of each warp's 32 (column 5 of every tile row) has σy ≠ σx:
  // it carries nothing, but it sends its warp down the two-loop path. The
  // weight tables of every non-zero pixel must not change, so neither may
  // the deterministic output, bit for bit.
  testing::Stack isotropic = testing::random_stack("isotropic warps", 5400u, 2, 48, 96, 14, false);
  for (int s = 0; s < isotropic.shape.slices; ++s)
    for (int y = 0; y < isotropic.shape.rows; ++y)
      for (int x = 5; x < isotropic.shape.cols; x += 32) isotropic.image[isotropic.index(s, y, x)] = 0.0f;
  testing::Stack general = isotropic;
  for (int s = 0; s < general.shape.slices; ++s)
    for (int y = 0; y < general.shape.rows; ++y)
      for (int x = 5; x < general.shape.cols; x += 32) general.sigma_y[general.index(s, y, x)] += 0.3f;
  options_.deterministic = true;
  const auto superposer = make_superposer(SuperpositionMethod::kGpuScatterTensorCore, options_);
  std::vector<float> a(isotropic.shape.pixel_count()), b(general.shape.pixel_count());
  superposer->superpose(isotropic.input(), a.data());
  superposer->superpose(general.input(), b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  expect_matches_oracle(isotropic);
}

TEST_F(GpuTensorCoreEveryRadius, ValuesOverTwelveOrdersOfMagnitude) {
  // The operands are split into TF32 high and low parts: a value or weight far
  // below the stack's largest must still be carried at float accuracy.
  testing::Stack st = testing::random_stack("values 1e-6 … 1e6", 5100u, 2, 64, 64, 12, true);
  std::mt19937 rng(5101u);
  std::uniform_real_distribution<float> exponent(-6.0f, 6.0f);
  for (float& v : st.image) v = std::pow(10.0f, exponent(rng));
  expect_matches_oracle(st);
  // And relative to each pixel's own scale: a stack of only the small values.
  for (float& v : st.image) v = std::min(v, 1e-3f);
  expect_matches_oracle(st);
}

TEST_F(GpuTensorCoreEveryRadius, SparseRowsAndLonePixels) {
  // Steps of all-zero source rows are skipped, warps of 32 zero pixels build
  // no weights, and zero 8-pixel groups are multiplied: lone pixels at every
  // column position of a tile and in rows of their own.
  testing::Stack st("lone pixels", 2, 50, 80);
  std::fill(st.sigma_x.begin(), st.sigma_x.end(), 2.2f);
  std::fill(st.sigma_y.begin(), st.sigma_y.end(), 3.1f);
  for (int col = 0; col < 80; col += 3) st.image[st.index(0, (col * 7) % 50, col)] = 1.0f + col;
  st.image[st.index(1, 49, 79)] = 5.0f;
  st.image[st.index(1, 0, 31)] = 2.0f;
  st.image[st.index(1, 16, 32)] = 3.0f;
  expect_matches_oracle(st);
}

TEST_F(GpuTensorCoreEveryRadius, DeterministicModeIsBitwiseReproducible) {
  const testing::Stack st = testing::random_stack("tensor cores, determinism", 5200u, 3, 80, 96, 20, true);
  options_.deterministic = true;
  std::vector<float> first(st.shape.pixel_count()), again(st.shape.pixel_count());
  const auto superposer = make_superposer(SuperpositionMethod::kGpuScatterTensorCore, options_);
  superposer->superpose(st.input(), first.data());
  for (int repeat = 0; repeat < 3; ++repeat) {
    superposer->superpose(st.input(), again.data());
    ASSERT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * sizeof(float))) << "run " << repeat + 2;
  }
  expect_matches_oracle(st);
}

TEST_F(GpuTensorCoreEveryRadius, ACrossoverBelowOnePixelIsAConfigError) {
  options_.tensor_core_min_radius_px = 0;
  try {
    make_superposer(SuperpositionMethod::kGpuScatterTensorCore, options_);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_core_min_radius_px 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace protondose
