#include "expect_error.h"
#include "protondose/compare/gamma.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "protondose/compare/resample.h"
#include "protondose/core/error.h"
#include "test_support.h"

namespace protondose::compare {
namespace {

using testing::cube_grid;
using testing::fill;

using protondose::testing::message_of;

/// True when voxel (i, j, k) is at least `margin` voxels from every face.
bool interior(const Grid3& g, int i, int j, int k, int margin) {
  return i >= margin && j >= margin && k >= margin && i < g.size[0] - margin &&
         j < g.size[1] - margin && k < g.size[2] - margin;
}

TEST(Gamma, IdenticalDosesGiveZeroEverywhere) {
  const Grid3 g = cube_grid(24, 2.0, {-23, -23, -23});
  const auto dose = fill(g, [](const Vec3& p) {
    return std::exp(-(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]) / (2 * 10.0 * 10.0));
  });
  GammaOptions o;
  o.dose_criterion_percent = 2.0;
  o.distance_mm = 2.0;
  const GammaResult r = gamma_3d(dose, dose, o);
  ASSERT_GT(r.evaluated_voxels, 1000u);  // not a vacuous pass
  EXPECT_EQ(r.pass_rate_percent, 100.0);
  EXPECT_EQ(r.max_gamma, 0.0);
  EXPECT_EQ(r.mean_gamma, 0.0);
  EXPECT_EQ(r.p95_gamma, 0.0);
}

// A linear dose D(x) = D0 + a·(n·x) and the same dose shifted by s along n:
// D_eval(x) = D0 + a·(n·x − s). Moving the search point by u along n,
//   γ²(u) = u²/Δd² + a²(u − s)²/ΔD²,
// is smallest at u* = s·(a²/ΔD²)/(1/Δd² + a²/ΔD²), where
//   γ = |s| / sqrt(Δd² + (ΔD/a)²)
// (the distance from a point to a line in the normalised (x/Δd, D/ΔD) space).
// Moves perpendicular to n only add distance. Trilinear interpolation of a
// linear field is exact, so the sub-voxel search must reach this value from
// above to within its resolution; a search on grid points alone would not
// (u* is not a multiple of the voxel spacing).
void check_shifted_gradient(const Vec3& direction, double shift_mm) {
  const Grid3 g = cube_grid(25, 1.0, {-12, -12, -12});
  const double n_len = std::sqrt(direction[0] * direction[0] + direction[1] * direction[1] +
                                 direction[2] * direction[2]);
  const Vec3 n{direction[0] / n_len, direction[1] / n_len, direction[2] / n_len};
  const double d0_gy = 1.0, a_gy_per_mm = 0.02;
  auto along = [&](const Vec3& p) { return n[0] * p[0] + n[1] * p[1] + n[2] * p[2]; };
  const auto ref = fill(g, [&](const Vec3& p) { return d0_gy + a_gy_per_mm * along(p); });
  const auto eval = fill(g, [&](const Vec3& p) { return d0_gy + a_gy_per_mm * (along(p) - shift_mm); });
  GammaOptions o;
  o.dose_criterion_percent = 2.0;  // ΔD = 0.02 Gy of 1 Gy
  o.distance_mm = 2.0;
  o.normalisation_dose_gy = 1.0;
  o.threshold_percent = 0.0;
  o.keep_gamma_volume = true;
  const GammaResult r = gamma_3d(ref, eval, o);
  const double dd_gy = 0.02;
  const double expected = std::abs(shift_mm) / std::sqrt(4.0 + std::pow(dd_gy / a_gy_per_mm, 2));
  ASSERT_TRUE(r.gamma.has_value());
  int checked = 0;
  for (int k = 0; k < g.size[2]; ++k)
    for (int j = 0; j < g.size[1]; ++j)
      for (int i = 0; i < g.size[0]; ++i) {
        if (!interior(g, i, j, k, 3)) continue;
        const double gamma = r.gamma->at(i, j, k);
        ASSERT_GE(gamma, expected - 1e-4) << "voxel " << i << "," << j << "," << k;
        ASSERT_LE(gamma, expected + 1e-5) << "voxel " << i << "," << j << "," << k;
        ++checked;
      }
  EXPECT_GT(checked, 5000);
}

TEST(Gamma, ShiftedGradientAlongAxisMatchesAnalyticGamma) { check_shifted_gradient({1, 0, 0}, 1.0); }

TEST(Gamma, ShiftedGradientAlongDiagonalMatchesAnalyticGamma) {
  check_shifted_gradient({1, 1, 1}, 1.3);
}

// A linear dose D(x) = D0 + a·x and its scaled copy k·D: at x0, moving by u,
//   D_eval(x0 + u) − D(x0) = k·a·u + (k − 1)·D(x0),
// a line V = m·U + q in U = u/Δd, V = (dose difference)/ΔD with m = k·a·Δd/ΔD
// and q = (k − 1)·D(x0)/ΔD, whose distance from the origin is
//   γ = |q| / sqrt(1 + m²).
// Global: ΔD = 3 % of the normalisation dose; local: ΔD = 3 % of D(x0).
TEST(Gamma, ScaledGradientMatchesAnalyticGammaGlobalAndLocal) {
  const Grid3 g = cube_grid(30, 1.5, {-22, -22, -22});
  const double d0_gy = 1.0, a_gy_per_mm = 0.01, k = 1.02, dta_mm = 3.0, crit = 0.03;
  const auto ref = fill(g, [&](const Vec3& p) { return d0_gy + a_gy_per_mm * p[0]; });
  const auto eval = fill(g, [&](const Vec3& p) { return k * (d0_gy + a_gy_per_mm * p[0]); });
  GammaOptions o;
  o.dose_criterion_percent = 100 * crit;
  o.distance_mm = dta_mm;
  o.normalisation_dose_gy = d0_gy;
  o.threshold_percent = 1.0;
  o.keep_gamma_volume = true;
  const GammaResult global = gamma_3d(ref, eval, o);
  o.local = true;
  const GammaResult local = gamma_3d(ref, eval, o);
  auto expected = [&](double d_ref, double dd) {
    const double m = k * a_gy_per_mm * dta_mm / dd, q = (k - 1) * d_ref / dd;
    return std::abs(q) / std::sqrt(1 + m * m);
  };
  int checked = 0;
  for (int i = 5; i < g.size[0] - 5; ++i) {
    const double d_ref = ref.at(i, 15, 15);
    const double g_global = global.gamma->at(i, 15, 15), g_local = local.gamma->at(i, 15, 15);
    EXPECT_NEAR(g_global, expected(d_ref, crit * d0_gy), 0.006) << "x = " << g.position_mm(i, 15, 15)[0];
    EXPECT_NEAR(g_local, expected(d_ref, crit * d_ref), 0.006) << "x = " << g.position_mm(i, 15, 15)[0];
    ++checked;
  }
  EXPECT_EQ(checked, 20);
  // Where D_ref > normalisation dose, local ΔD is larger, so local γ is smaller.
  EXPECT_LT(local.gamma->at(g.size[0] - 6, 15, 15), global.gamma->at(g.size[0] - 6, 15, 15) - 0.01);
  EXPECT_GT(local.gamma->at(5, 15, 15), global.gamma->at(5, 15, 15) + 0.01);
}

// No gradient: γ = |D_eval − D_ref| / ΔD everywhere, 0.05/0.06 at 3 % of 2 Gy
// and 0.05/0.04 at 2 %.
TEST(Gamma, UniformOffsetPassesOrFailsEverywhere) {
  const Grid3 g = cube_grid(10, 2.0);
  const Volume<float> ref(g, 2.0f), eval(g, 2.05f);
  GammaOptions o;
  o.dose_criterion_percent = 3.0;
  o.distance_mm = 3.0;
  GammaResult r = gamma_3d(ref, eval, o);
  EXPECT_EQ(r.evaluated_voxels, 1000u);
  EXPECT_EQ(r.pass_rate_percent, 100.0);
  EXPECT_NEAR(r.mean_gamma, 0.05 / 0.06, 1e-5);
  EXPECT_NEAR(r.max_gamma, 0.05 / 0.06, 1e-5);
  EXPECT_NEAR(r.p95_gamma, 0.05 / 0.06, 1e-5);
  o.dose_criterion_percent = 2.0;
  r = gamma_3d(ref, eval, o);
  EXPECT_EQ(r.pass_rate_percent, 0.0);
  EXPECT_EQ(r.passed_voxels, 0u);
  EXPECT_NEAR(r.mean_gamma, 1.25, 1e-5);
}

TEST(Gamma, ThresholdExcludesExactlyTheLowDoseReferenceVoxels) {
  const Grid3 g = cube_grid(20, 1.0);
  const auto ref = fill(g, [](const Vec3& p) { return 0.1 + 0.1 * p[0]; });  // 0.1 … 2.0 Gy along x
  GammaOptions o;
  o.threshold_percent = 30.0;  // of the maximum 2.0 Gy: 0.6 Gy
  o.keep_gamma_volume = true;
  const GammaResult r = gamma_3d(ref, ref, o);
  std::size_t expected = 0;
  for (float d : ref.data) expected += d >= 0.6f ? 1 : 0;
  ASSERT_GT(expected, 1000u);
  EXPECT_EQ(r.evaluated_voxels, expected);
  EXPECT_DOUBLE_EQ(r.threshold_dose_gy, 0.6);
  EXPECT_DOUBLE_EQ(r.normalisation_dose_gy, 2.0);
  for (std::size_t n = 0; n < ref.data.size(); ++n)
    EXPECT_EQ(r.gamma->data[n] == kGammaNotEvaluated, ref.data[n] < 0.6f);
}

// The branch-and-bound search must find the same minimum as brute force over
// the trilinear interpolant on a dense lattice (spacing 0.05 mm), here on a
// rough random field where many cells must be refined. The two differ only by
// their sampling resolution.
TEST(Gamma, SubVoxelSearchMatchesDenseSearchOnRandomField) {
  const unsigned seed = 20261123;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.8, 1.2);
  const Grid3 g = cube_grid(12, 1.0);
  Volume<float> ref(g), eval(g);
  for (auto& v : ref.data) v = static_cast<float>(u(rng));
  for (auto& v : eval.data) v = static_cast<float>(u(rng));
  GammaOptions o;
  o.dose_criterion_percent = 5.0;
  o.distance_mm = 1.0;
  o.max_search_mm = 2.0;
  o.normalisation_dose_gy = 1.0;
  o.threshold_percent = 0.0;
  o.keep_gamma_volume = true;
  const GammaResult r = gamma_3d(ref, eval, o);
  const double dd = 0.05, step = 0.05;
  std::uniform_int_distribution<int> pick(3, 8);
  for (int trial = 0; trial < 12; ++trial) {
    const int i = pick(rng), j = pick(rng), k = pick(rng);
    double best2 = 1e30;
    for (double x = -2; x <= 2 + 1e-9; x += step)
      for (double y = -2; y <= 2 + 1e-9; y += step)
        for (double z = -2; z <= 2 + 1e-9; z += step) {
          const double d2 = x * x + y * y + z * z;
          if (d2 > 4.0 + 1e-9 || d2 >= best2) continue;
          const double diff = sample_trilinear(eval, i + x, j + y, k + z) - ref.at(i, j, k);
          best2 = std::min(best2, d2 + diff * diff / (dd * dd));
        }
    const double dense = std::sqrt(best2);
    // Both sample the same interpolant, so neither is below the true minimum;
    // the dense lattice misses it by up to (gradient × 0.04 mm)/ΔD, the branch
    // and bound (with its linear-model sample in the finest boxes) by less.
    EXPECT_LE(r.gamma->at(i, j, k), dense + 0.002) << "seed " << seed << " voxel " << i << "," << j << "," << k;
    EXPECT_GE(r.gamma->at(i, j, k), dense - 0.03) << "seed " << seed << " voxel " << i << "," << j << "," << k;
  }
}

// Refining the search resolution from Δd/10 to Δd/50 (and dropping the
// pruning tolerance) must not change γ beyond the tolerance: the search has
// converged to the minimum over the interpolant. Case: a Gaussian dose with
// steep edges (σ 3 mm on 1 mm voxels) shifted by (0.6, 0.3, 0) mm, scaled 1.02.
TEST(Gamma, ResultIsConvergedAtTheDefaultResolution) {
  const Grid3 g = cube_grid(24, 1.0, {-11.5, -11.5, -11.5});
  auto gauss = [](const Vec3& p) { return std::exp(-(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]) / (2 * 9.0)); };
  const auto ref = fill(g, gauss);
  const auto eval = fill(g, [&](const Vec3& p) { return 1.02 * gauss({p[0] - 0.6, p[1] - 0.3, p[2]}); });
  GammaOptions o;
  o.dose_criterion_percent = 2.0;
  o.distance_mm = 1.0;
  o.keep_gamma_volume = true;
  const GammaResult coarse = gamma_3d(ref, eval, o);
  o.resolution_fraction = 0.02;
  o.tolerance = 0.0;
  const GammaResult fine = gamma_3d(ref, eval, o);
  ASSERT_GT(coarse.evaluated_voxels, 1000u);
  ASSERT_GT(coarse.max_gamma, 0.5);  // a comparison with something to find
  for (std::size_t n = 0; n < ref.data.size(); ++n) {
    if (coarse.gamma->data[n] == kGammaNotEvaluated) continue;
    // Different sample points, both real interpolant values: either may be
    // the lower one, by little.
    ASSERT_NEAR(coarse.gamma->data[n], fine.gamma->data[n], 0.003) << "voxel " << n;
  }
}

TEST(Gamma, DifferentGridsAreResampledOntoTheReference) {
  // A linear field on a coarse, offset evaluation grid that covers the
  // reference: resampling is exact, so γ is 0.
  const auto linear = [](const Vec3& p) { return 1.0 + 0.01 * p[0] - 0.02 * p[1] + 0.005 * p[2]; };
  const Grid3 ref_grid = cube_grid(20, 1.0, {-10, -10, -10});
  const Grid3 eval_grid = cube_grid(12, 2.5, {-13.7, -13.1, -12.9});
  const GammaResult r = gamma_3d(fill(ref_grid, linear), fill(eval_grid, linear), GammaOptions{});
  EXPECT_EQ(r.evaluated_voxels, ref_grid.voxel_count());
  EXPECT_EQ(r.reference_voxels_outside_evaluated, 0u);
  EXPECT_LT(r.max_gamma, 1e-4);
}

TEST(Gamma, ZeroReferenceIsAnInputError) {
  const Volume<float> zero(cube_grid(4, 1.0), 0.0f);
  const auto msg = message_of<InputError>([&] { gamma_3d(zero, zero, GammaOptions{}); });
  EXPECT_NE(msg.find("zero everywhere"), std::string::npos) << msg;
}

TEST(Gamma, NonFiniteDoseIsAnInputErrorNamingTheVoxel) {
  Volume<float> ref(cube_grid(4, 1.0), 1.0f), eval(cube_grid(4, 1.0), 1.0f);
  eval.at(1, 2, 3) = std::nanf("");
  const auto msg = message_of<InputError>([&] { gamma_3d(ref, eval, GammaOptions{}); });
  EXPECT_NE(msg.find("evaluated dose: voxel (1, 2, 3)"), std::string::npos) << msg;
}

TEST(Gamma, MismatchedDataSizeIsAnInputError) {
  Volume<float> ref(cube_grid(4, 1.0), 1.0f);
  Volume<float> eval = ref;
  eval.data.resize(10);
  const auto msg = message_of<InputError>([&] { gamma_3d(ref, eval, GammaOptions{}); });
  EXPECT_NE(msg.find("holds 10 values"), std::string::npos) << msg;
}

TEST(Gamma, NoVoxelAboveThresholdIsAnInputError) {
  Volume<float> ref(cube_grid(4, 1.0), 1.0f);
  GammaOptions o;
  o.normalisation_dose_gy = 100.0;  // threshold 10 Gy, reference 1 Gy
  const auto msg = message_of<InputError>([&] { gamma_3d(ref, ref, o); });
  EXPECT_NE(msg.find("no reference voxel reaches the low-dose threshold of 10 Gy"), std::string::npos) << msg;
}

TEST(Gamma, InvalidOptionsAreConfigErrors) {
  const Volume<float> ref(cube_grid(4, 1.0), 1.0f);
  GammaOptions o;
  o.dose_criterion_percent = 0.0;
  auto msg = message_of<ConfigError>([&] { gamma_3d(ref, ref, o); });
  EXPECT_NE(msg.find("dose criterion (%) = 0"), std::string::npos) << msg;
  o = GammaOptions{};
  o.local = true;
  o.threshold_percent = 0.0;
  msg = message_of<ConfigError>([&] { gamma_3d(ref, ref, o); });
  EXPECT_NE(msg.find("with local gamma"), std::string::npos) << msg;
  o = GammaOptions{};
  o.max_search_mm = 1.0;  // below the 3 mm distance criterion
  msg = message_of<ConfigError>([&] { gamma_3d(ref, ref, o); });
  EXPECT_NE(msg.find("max search (mm) = 1"), std::string::npos) << msg;
}

TEST(Resample, LinearFieldIsReproducedExactlyOnARotatedGrid) {
  const auto linear = [](const Vec3& p) { return 3.0 + 0.1 * p[0] + 0.05 * p[1] - 0.07 * p[2]; };
  const Grid3 src_grid = cube_grid(30, 1.0, {-15, -15, -15});
  Grid3 dst;
  dst.size = {10, 8, 6};
  dst.spacing_mm = {0.7, 1.3, 2.1};
  dst.origin_mm = {-4.2, 1.0, -5.0};  // all centres inside the source's box of voxel centres
  const double c = std::cos(0.4), s = std::sin(0.4);
  dst.axis = {{{c, s, 0.0}, {-s, c, 0.0}, {0.0, 0.0, 1.0}}};
  std::size_t outside = 99;
  const Volume<float> out = resample_trilinear(fill(src_grid, linear), dst, &outside);
  EXPECT_EQ(outside, 0u);
  for (int k = 0; k < dst.size[2]; ++k)
    for (int j = 0; j < dst.size[1]; ++j)
      for (int i = 0; i < dst.size[0]; ++i)
        ASSERT_NEAR(out.at(i, j, k), linear(dst.position_mm(i, j, k)), 2e-5);
}

TEST(Resample, PointsOutsideTheSourceExtentAreZeroAndCounted) {
  const Volume<float> src(cube_grid(4, 1.0), 5.0f);  // extent −0.5 … 3.5 mm
  Grid3 dst = cube_grid(1, 1.0);
  dst.size = {3, 1, 1};
  dst.origin_mm = {3.25, 0.0, 0.0};  // 3.25 (edge half-voxel), 4.25, 5.25 (outside)
  std::size_t outside = 0;
  const Volume<float> out = resample_trilinear(src, dst, &outside);
  EXPECT_EQ(out.data[0], 5.0f);
  EXPECT_EQ(out.data[1], 0.0f);
  EXPECT_EQ(out.data[2], 0.0f);
  EXPECT_EQ(outside, 2u);
}

}  // namespace
}  // namespace protondose::compare
