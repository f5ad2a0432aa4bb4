// The CPU oracle against analytic results: the top of the oracle ladder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "protondose/gpu/superposition.h"
#include "half_erfc_walk.h"
#include "wide_gaussian_series.h"
#include "stack_fixtures.h"

namespace protondose {
namespace {

using testing::Stack;

double expected_weight(int d, double sigma) {
  return 0.5 * (std::erf((d + 0.5) / (std::sqrt(2.0) * sigma)) -
                std::erf((d - 0.5) / (std::sqrt(2.0) * sigma)));
}

TEST(PixelIntegratedGaussian, MatchesErfDefinitionAndIsSymmetric) {
  for (double sigma : {0.3, 1.0, 2.7, 10.0}) {
    for (int d = 0; d <= 12; ++d) {
      EXPECT_NEAR(pixel_integrated_gaussian(d, sigma), expected_weight(d, sigma), 1e-15);
      EXPECT_DOUBLE_EQ(pixel_integrated_gaussian(-d, sigma), pixel_integrated_gaussian(d, sigma));
    }
  }
  EXPECT_EQ(pixel_integrated_gaussian(0, 0.0), 1.0);
  EXPECT_EQ(pixel_integrated_gaussian(1, 0.0), 0.0);
}

TEST(PixelIntegratedGaussian, RadiusIsCeilOfCutoffTimesSigma) {
  EXPECT_EQ(kernel_radius_px(0.0f, 3.0f), 0);
  EXPECT_EQ(kernel_radius_px(0.1f, 3.0f), 1);
  EXPECT_EQ(kernel_radius_px(1.0f, 3.0f), 3);
  EXPECT_EQ(kernel_radius_px(1.01f, 3.0f), 4);
  EXPECT_EQ(kernel_radius_px(10.0f / 3.0f, 3.0f), 10);
}

// The tensor-core scatter's weight tables (gpu/src/cuda/scatter_tensor_core.cu)
// walk h_d = ½·erfc((d + ½)·a), a = 1/(√2σ), and take K(0) = 1 − 2h₀,
// K(d) = h_{d−1} − h_d: a fitted erfc in float, checked here against the
// exact weights over the widths the tables see (the GPU tests check the
// superposition that uses them against the oracle, on a GPU).
TEST(HalfErfcWalk, WalkedWeightsComeWithinFourTenthsOfAMillionthOfTheExactOnes) {
  double worst = 0.0, worst_kernel_sum = 0.0;
  for (int i = 0; i < 2000; ++i) {
    const float sigma = 0.2f + 10.8f * static_cast<float>(i) / 1999.0f;
    const int r = gaussian_radius_px(sigma, 3.0f);
    HalfErfcWalk half_erfc((1.0f / sigma) * 0.70710678118654752f);
    float upper = half_erfc.value();
    double kernel_sum = std::abs((1.0f - 2.0f * upper) - expected_weight(0, sigma));
    double most = kernel_sum;
    for (int d = 1; d <= r; ++d) {
      half_erfc.advance();
      const float next = half_erfc.value();
      const double error = std::abs(static_cast<double>(upper - next) - expected_weight(d, sigma));
      most = std::max(most, error);
      kernel_sum += 2.0 * error;  // ±d
      upper = next;
    }
    worst = std::max(worst, most);
    worst_kernel_sum = std::max(worst_kernel_sum, kernel_sum);
  }
  EXPECT_LE(worst, 4.0e-7);
  EXPECT_LE(worst_kernel_sum, 2.5e-6);
}

TEST(HalfErfcWalk, AZeroScaleWalksZerosSoThatAPixelDepositsLocally) {
  // σ below kLocalDepositSigmaPx: the tables take a = 0, K(0) = 1, K(d) = 0.
  HalfErfcWalk half_erfc(0.0f);
  EXPECT_EQ(half_erfc.value(), 0.0f);
  for (int d = 1; d <= 8; ++d) {
    half_erfc.advance();
    EXPECT_EQ(half_erfc.value(), 0.0f) << d;
  }
}

/// Over every scale a = 1/(√2σ) below `max_scale` and d out to 10σ (and 256 px):
/// the largest |K(d) − exact| / K(0), and the largest error of a lone pixel's
/// output K(i)·K(j) over its peak K(0)², of weights(a, d).
template <class Weights>
std::pair<double, double> worst_wide_weight_errors(double max_scale, Weights&& weights) {
  double worst_weight = 0.0, worst_lone_pixel = 0.0;
  for (double scale = 3e-4; scale < max_scale; scale *= 1.01) {
    const float a = static_cast<float>(scale);
    const double sigma = 1.0 / (std::sqrt(2.0) * a);
    const int r = std::min(256, static_cast<int>(std::ceil(10.0 * sigma)));
    std::vector<float> k(r + 1);
    std::vector<double> exact(r + 1);
    for (int d = 0; d <= r; ++d) {
      k[d] = weights(a, d);
      exact[d] = expected_weight(d, sigma);
      worst_weight = std::max(worst_weight, std::abs(k[d] - exact[d]) / exact[0]);
    }
    for (int i = 0; i <= r; ++i)
      for (int j = 0; j <= r; ++j)
        worst_lone_pixel = std::max(worst_lone_pixel, std::abs(static_cast<double>(k[i]) * k[j] - exact[i] * exact[j]) /
                                                          (exact[0] * exact[0]));
  }
  return {worst_weight, worst_lone_pixel};
}

// The weights of wide Gaussians (σ > 2.36 px) as every GPU path takes them
// (gaussian_weight, the tensor cores' tables): products, no erf differences.
TEST(WideGaussianSeries, WeightsComeWithinFourTenthsOfAMillionthOfTheCentreWeight) {
  const auto [weight, lone_pixel] = worst_wide_weight_errors(
      WideGaussianSeries::kMaxScale, [](float a, int d) { return WideGaussianSeries(a).weight(d); });
  EXPECT_LE(weight, 4e-7);
  EXPECT_LE(lone_pixel, 8e-7);  // the superposition's tolerance is 1e-5
  for (float a : {0.01f, 0.1f, 0.29f})
    EXPECT_EQ(WideGaussianSeries(a).centre_weight(), WideGaussianSeries(a).weight(0)) << a;
}

TEST(WideGaussianSeries, ErfcDifferencesOfTheSameWidthsMissTheTolerance) {
  // Why the series: the same widths by erfc differences (gaussian_weight's
  // formula before, in float with the host's erfcf) put a lone pixel's
  // output over 10⁻⁵ of its peak.
  const auto [weight, lone_pixel] = worst_wide_weight_errors(WideGaussianSeries::kMaxScale, [](float a, int d) {
    return d == 0 ? 1.0f - std::erfc(0.5f * a) : 0.5f * (std::erfc((d - 0.5f) * a) - std::erfc((d + 0.5f) * a));
  });
  EXPECT_GT(lone_pixel, 1e-5) << "weight error " << weight;
}

TEST(CpuReferenceSuperposition, OnePixelWeightsSumToOneMinusCutoffLoss) {
  // A single hot pixel in the middle of a large slice: nothing is clipped, so
  // the output sums to the integral of the Gaussian within ±(r + ½) per axis.
  for (float sigma : {0.4f, 1.3f, 3.0f}) {
    Stack st("hot pixel sigma " + std::to_string(sigma), 1, 41, 41);
    st.image[st.index(0, 20, 20)] = 2.0f;
    std::fill(st.sigma_x.begin(), st.sigma_x.end(), sigma);
    std::fill(st.sigma_y.begin(), st.sigma_y.end(), sigma);
    const std::vector<double> out = superpose_cpu_reference(st.input());
    const int r = kernel_radius_px(sigma, 3.0f);
    const double axis_mass = std::erf((r + 0.5) / (std::sqrt(2.0) * sigma));
    const double total = std::accumulate(out.begin(), out.end(), 0.0);
    EXPECT_NEAR(total, 2.0 * axis_mass * axis_mass, 1e-12) << st.name;
    EXPECT_LT(total, 2.0) << "the cut-off must lose a little: " << st.name;
  }
}

TEST(CpuReferenceSuperposition, PointSourceGivesTheSeparableAnisotropicGaussian) {
  Stack st("point source, sigma_x != sigma_y", 1, 33, 29);
  const int yc = 16, xc = 14;
  st.image[st.index(0, yc, xc)] = 1.0f;
  st.sigma_x[st.index(0, yc, xc)] = 2.2f;
  st.sigma_y[st.index(0, yc, xc)] = 0.9f;
  const std::vector<double> out = superpose_cpu_reference(st.input());
  const int rx = kernel_radius_px(2.2f, 3.0f), ry = kernel_radius_px(0.9f, 3.0f);
  for (int y = 0; y < 33; ++y) {
    for (int x = 0; x < 29; ++x) {
      const int dx = x - xc, dy = y - yc;
      const double expected = (std::abs(dx) <= rx && std::abs(dy) <= ry)
                                  ? expected_weight(dx, 2.2f) * expected_weight(dy, 0.9f)
                                  : 0.0;
      ASSERT_NEAR(out[st.index(0, y, x)], expected, 1e-14) << "at y=" << y << " x=" << x;
    }
  }
}

TEST(CpuReferenceSuperposition, ZeroSigmaIsIdentity) {
  Stack st = testing::random_stack("identity", 7u, 3, 19, 23, 1, false);
  std::fill(st.sigma_x.begin(), st.sigma_x.end(), 0.0f);
  std::fill(st.sigma_y.begin(), st.sigma_y.end(), 0.0f);
  const std::vector<double> out = superpose_cpu_reference(st.input());
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<double>(st.image[i]));
}

TEST(CpuReferenceSuperposition, IsMirrorSymmetricForMirroredInput) {
  Stack st = testing::random_stack("mirror", 11u, 1, 24, 30, 6, true);
  Stack mirrored = st;
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 30; ++x) {
      const std::size_t from = st.index(0, y, x), to = st.index(0, 23 - y, 29 - x);
      mirrored.image[to] = st.image[from];
      mirrored.sigma_x[to] = st.sigma_x[from];
      mirrored.sigma_y[to] = st.sigma_y[from];
    }
  const std::vector<double> a = superpose_cpu_reference(st.input());
  const std::vector<double> b = superpose_cpu_reference(mirrored.input());
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 30; ++x)
      ASSERT_NEAR(a[st.index(0, y, x)], b[st.index(0, 23 - y, 29 - x)], 1e-12);
}

TEST(CpuReferenceSuperposition, ClipsContributionsOutsideTheSlice) {
  // A hot pixel in the corner keeps only the quadrant inside the slice.
  Stack st("corner pixel", 1, 16, 16);
  st.image[0] = 1.0f;
  st.sigma_x[0] = st.sigma_y[0] = 1.5f;
  const std::vector<double> out = superpose_cpu_reference(st.input());
  const int r = kernel_radius_px(1.5f, 3.0f);
  double half_axis = 0.0;
  for (int d = 0; d <= r; ++d) half_axis += expected_weight(d, 1.5);
  EXPECT_NEAR(std::accumulate(out.begin(), out.end(), 0.0), half_axis * half_axis, 1e-12);
}

TEST(CpuReferenceSuperposition, ResultDoesNotDependOnThreadCount) {
  const Stack st = testing::random_stack("threads", 2024u, 2, 70, 45, 9, true);
  SuperpositionOptions one, many;
  one.cpu_threads = 1;
  many.cpu_threads = 7;
  const std::vector<double> a = superpose_cpu_reference(st.input(), one);
  const std::vector<double> b = superpose_cpu_reference(st.input(), many);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "bitwise, at " << i;
}

TEST(CpuReferenceSuperposition, SlicesAreIndependent) {
  const Stack st = testing::random_stack("slices", 5u, 3, 20, 20, 5, false);
  const std::vector<double> all = superpose_cpu_reference(st.input());
  Stack middle("middle slice", 1, 20, 20);
  const std::size_t plane = 400;
  std::copy_n(st.image.begin() + plane, plane, middle.image.begin());
  std::copy_n(st.sigma_x.begin() + plane, plane, middle.sigma_x.begin());
  std::copy_n(st.sigma_y.begin() + plane, plane, middle.sigma_y.begin());
  const std::vector<double> one = superpose_cpu_reference(middle.input());
  for (std::size_t i = 0; i < plane; ++i) ASSERT_EQ(all[plane + i], one[i]);
}

// ---- bad input: type and message

void expect_input_error(const SuperpositionInput& input, const std::string& fragment,
                        SuperpositionOptions options = {}) {
  try {
    superpose_cpu_reference(input, options);
    FAIL() << "expected InputError containing '" << fragment << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SuperpositionValidation, RejectsNegativeSigmaNamingThePixel) {
  Stack st("negative sigma", 2, 4, 5);
  st.sigma_x[st.index(1, 2, 3)] = -0.5f;
  expect_input_error(st.input(), "sigma_x = -0.5 px at slice 1, row 2, col 3");
}

TEST(SuperpositionValidation, RejectsNanSigmaAndNanOrNegativeImage) {
  Stack st("nan", 1, 4, 4);
  st.sigma_y[5] = std::nanf("");
  expect_input_error(st.input(), "sigma_y = nan px at slice 0, row 1, col 1");
  Stack neg("negative image", 1, 4, 4);
  neg.image[3] = -1.0f;
  expect_input_error(neg.input(), "image value -1 at slice 0, row 0, col 3");
  Stack inf("inf image", 1, 4, 4);
  inf.image[0] = INFINITY;
  expect_input_error(inf.input(), "is not a finite number >= 0");
}

TEST(SuperpositionValidation, RejectsSigmaBeyondTheLargestRadius) {
  Stack st("huge sigma", 1, 4, 4);
  st.sigma_x[0] = 100.0f;
  expect_input_error(st.input(), "needs a kernel radius of 300 px");
}

TEST(SuperpositionValidation, RejectsMismatchedSizesAndEmptyStacks) {
  Stack st("sizes", 1, 4, 4);
  SuperpositionInput in = st.input();
  in.sigma_y_px.size = 15;
  expect_input_error(in, "sigma_y_px has 15 values but the stack 1 x 4 x 4 needs 16");
  in = st.input();
  in.shape.rows = 0;
  expect_input_error(in, "must be positive in every dimension");
  in = st.input();
  in.image.data = nullptr;
  expect_input_error(in, "image is missing");
}

TEST(SuperpositionValidation, RejectsCutoffOutsideRange) {
  Stack st("cutoff", 1, 4, 4);
  SuperpositionOptions options;
  options.cutoff_sigmas = 0.0;
  expect_input_error(st.input(), "cut-off 0 sigma is outside the accepted range (0, 10]", options);
}

TEST(SuperposerFactory, CpuReferenceRoundsTheOracleToFloat) {
  const Stack st = testing::random_stack("factory", 3u, 2, 17, 13, 4, true);
  std::vector<float> out(st.shape.pixel_count());
  make_superposer(SuperpositionMethod::kCpuReference)->superpose(st.input(), out.data());
  const std::vector<double> reference = superpose_cpu_reference(st.input());
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<float>(reference[i]));
}

// Slice groups are for device calls (slice_groups_gpu_test.cpp); the host
// entry points return the whole stack and refuse them rather than ignore them.
TEST(SliceGroupsHost, TheHostArrayCallsRefuseGroups) {
  Stack st("one pixel", 1, 4, 4);
  st.image[5] = 1.0f;
  SuperpositionInput in = st.input();
  int dummy[2] = {0, 0};
  float out_plane[16] = {};
  in.groups = {1, dummy, dummy, out_plane};
  try {
    superpose_cpu_reference(in, {});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("slice groups"), std::string::npos) << e.what();
  }
  std::vector<float> out(st.shape.pixel_count());
  EXPECT_THROW(make_superposer(SuperpositionMethod::kCpuReference)->superpose(in, out.data()), InputError);
}

}  // namespace
}  // namespace protondose
