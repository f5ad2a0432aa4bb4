#include "csv_fields.h"
#include "protondose/physics/nuclear_halo.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {
namespace {

const auto split = protondose::testing::split_csv_line;

// Reference values of the Soukup et al. (PMB 50:5089, 2005) weight from an
// independent implementation: the tabulation that da Silva et al. (Front Oncol
// 5:281, 2015) shipped with their GPU code (RayTraceDicom,
// LUTs/nuclear_weights_and_sigmas_Soukup.txt: R = 30.023 mm sampled every
// 1/27.2791 mm; R = 32.0236 mm every 1/25.5749 mm). Their table starts where
// W turns positive and peaks at 0.0445776.
TEST(NuclearHalo, SoukupWeightMatchesAnIndependentTabulation) {
  struct Point { double range_mm, depth_mm, weight; };
  const Point points[] = {{30.023, 18 / 27.2791, 1.83391e-05}, {30.023, 19 / 27.2791, 1.69701e-04},
                          {30.023, 20 / 27.2791, 3.20598e-04}, {32.0236, 14 / 25.5749, 6.57099e-05},
                          {32.0236, 16 / 25.5749, 3.92583e-04}};
  for (const Point& p : points)
    EXPECT_NEAR(soukup_halo_weight(p.depth_mm, p.range_mm), p.weight, 2e-3 * p.weight + 2e-8)
        << "R " << p.range_mm << " mm, z " << p.depth_mm << " mm";
  EXPECT_LT(soukup_halo_weight(17 / 27.2791, 30.023), 0.0);  // the table's last zero
  double peak = 0.0;
  for (int i = 1; i < 819; ++i) peak = std::max(peak, soukup_halo_weight(i / 27.2791, 30.023));
  EXPECT_NEAR(peak, 0.0445776, 2e-6);
}

// shared/docs/physics-and-method.md §2 summarises Soukup et al. and Pedroni et
// al.: weight ~10–15 % by mid-range at 150 MeV, σ ≈ 6–11 mm.
TEST(NuclearHalo, SoukupWeightAndWidthAt150MeVMidRange) {
  const NuclearHalo halo(150.0, HaloModel::kSoukup2005);
  const double mid = 0.5 * halo.csda_range_mm();
  EXPECT_NEAR(halo.csda_range_mm(), 157.7, 0.5);
  EXPECT_GE(halo.weight_fraction(mid), 0.10);
  EXPECT_LE(halo.weight_fraction(mid), 0.15);
  EXPECT_GE(halo.added_sigma_mm(mid), 6.0);
  EXPECT_LE(halo.added_sigma_mm(mid), 11.0);
  EXPECT_DOUBLE_EQ(halo.weight_fraction(mid), soukup_halo_weight(mid, halo.csda_range_mm()));
  EXPECT_DOUBLE_EQ(halo.added_sigma_mm(mid), soukup_halo_added_sigma_mm(mid, halo.csda_range_mm()));
  // The published composition: σ_halo² = σ_core² + σ_N².
  EXPECT_NEAR(halo.sigma_with_core_mm(mid, 5.0), std::hypot(5.0, halo.added_sigma_mm(mid)), 1e-12);
  // Without a core, a zero-width pencil: its Fermi–Eyges spread at mid-range
  // (≈1.5–2.5 mm at 150 MeV) widens σ_N a little.
  EXPECT_GT(halo.sigma_mm(mid), halo.added_sigma_mm(mid));
  EXPECT_LT(halo.sigma_mm(mid), std::hypot(halo.added_sigma_mm(mid), 2.5));
}

// The default stays the MCsquare fit: the engine's water_dcpt regression fails
// with kSoukup2005 (docs/physics/nuclear-halo.md, "Which model is the default").
TEST(NuclearHalo, DefaultIsTheMonteCarloFitAndSoukupIsSelectableByName) {
  EXPECT_EQ(kDefaultHaloModel, HaloModel::kMcsquareFit);
  EXPECT_EQ(NuclearHalo(150.0).model(), HaloModel::kMcsquareFit);
  EXPECT_EQ(NuclearHalo(150.0, HaloModel::kSoukup2005).model(), HaloModel::kSoukup2005);
  EXPECT_STREQ(halo_model_name(HaloModel::kSoukup2005), "soukup-2005");
  EXPECT_STREQ(halo_model_name(HaloModel::kMcsquareFit), "mcsquare-fit");
  const NuclearHalo halo(150.0);
  EXPECT_DOUBLE_EQ(NuclearHalo::weight_fraction(80.0, 150.0), halo.weight_fraction(80.0));
  EXPECT_DOUBLE_EQ(NuclearHalo::sigma_mm(80.0, 150.0), halo.sigma_mm(80.0));
}

TEST(NuclearHalo, SoukupIsHeldAtTheRangeBeyondItAndNeverNegative) {
  for (double e : {20.0, 70.0, 150.0, 230.0, 250.0}) {
    const NuclearHalo halo(e, HaloModel::kSoukup2005);
    const double r = halo.csda_range_mm();
    EXPECT_DOUBLE_EQ(halo.weight_fraction(1.05 * r), halo.weight_fraction(r)) << e;
    EXPECT_DOUBLE_EQ(halo.added_sigma_mm(NuclearHalo::kMaxDepthOverRange * r), halo.added_sigma_mm(r)) << e;
    EXPECT_GE(halo.weight_fraction(0.0), 0.0) << e;
  }
  // Below ~1 mm at 70 MeV the published W is negative: clamped to 0.
  const NuclearHalo low(70.0, HaloModel::kSoukup2005);
  EXPECT_LT(soukup_halo_weight(0.0, low.csda_range_mm()), 0.0);
  EXPECT_EQ(low.weight_fraction(0.0), 0.0);
}

TEST(NuclearHalo, FittedModelZeroAtTheSurfaceAndRisingWithDepth) {
  for (double e : {70.0, 150.0, 230.0}) {
    const NuclearHalo halo(e, HaloModel::kMcsquareFit);
    EXPECT_DOUBLE_EQ(halo.weight_fraction(0.0), 0.0) << e;
    const double r = halo.csda_range_mm();
    EXPECT_LT(halo.weight_fraction(0.25 * r), halo.weight_fraction(0.5 * r)) << e;
    EXPECT_LT(halo.weight_fraction(0.5 * r), halo.weight_fraction(r)) << e;
    EXPECT_EQ(halo.added_sigma_mm(0.5 * r), 0.0) << e;
    EXPECT_DOUBLE_EQ(halo.sigma_with_core_mm(0.5 * r, 4.0), halo.sigma_mm(0.5 * r)) << e;
  }
}

TEST(NuclearHalo, FittedModelWeightAndWidthAt150MeVMidRange) {
  // Fitted model (docs/physics/nuclear-halo.md): at half the range of 150 MeV
  // (≈79 mm) W = κ·w·(1 − b/2) ≈ 3.2 %, σ_halo = R0(a + c/2) + d ≈ 26 mm.
  const NuclearHalo halo(150.0, HaloModel::kMcsquareFit);
  const double mid = 0.5 * halo.csda_range_mm();
  EXPECT_NEAR(halo.weight_fraction(mid), 4.239e-4 * mid * (1.0 - 0.0932 * 0.5), 1e-12);
  EXPECT_NEAR(halo.weight_fraction(mid), 0.032, 0.002);
  EXPECT_NEAR(halo.sigma_mm(mid), 26.2, 0.3);
}

TEST(NuclearHalo, BoundedWeightAndPositiveWidthOverTheWholeDomain) {
  for (HaloModel model : {HaloModel::kSoukup2005, HaloModel::kMcsquareFit}) {
    for (double e = NuclearHalo::kMinEnergyMev; e <= NuclearHalo::max_energy_mev(model); e += 10.0) {
      const NuclearHalo halo(e, model);
      const double deepest = NuclearHalo::kMaxDepthOverRange * halo.csda_range_mm();
      for (int i = 0; i <= 110; ++i) {
        const double w = i == 110 ? deepest : deepest * i / 110.0;
        const double weight = halo.weight_fraction(w);
        const std::string where = std::string(halo_model_name(model)) + ", " + std::to_string(e) + " MeV, " +
                                  std::to_string(w) + " mm";
        ASSERT_TRUE(std::isfinite(weight)) << where;
        ASSERT_GE(weight, 0.0) << where;
        ASSERT_LT(weight, 0.25) << where;
        ASSERT_TRUE(std::isfinite(halo.sigma_mm(w))) << where;
        ASSERT_GT(halo.sigma_mm(w), model == HaloModel::kSoukup2005 ? 2.5 : 5.0) << where;
      }
    }
  }
}

// The model against the Monte Carlo it was fitted to: fraction of the IDD
// outside a centred 40 mm and 80 mm square, double Gaussian with the MC core σ
// (shared/reference/dcpt-v5-water-sigma) and the halo. Tolerance ±45 % of the
// MC value (+0.002 absolute): a single Gaussian cannot follow the halo's long
// tail exactly (docs/physics/nuclear-halo.md gives the per-depth table).
TEST(NuclearHalo, FittedModelReproducesMonteCarloContainmentWithinStatedTolerance) {
  const std::string dir = std::string(PROTONDOSE_SHARED_DIR) + "/reference/";
  std::ifstream containment(dir + "dcpt-v5-water-idd/idd_lateral_containment.csv");
  ASSERT_TRUE(containment.good());
  std::string line;
  std::getline(containment, line);
  int compared = 0;
  while (std::getline(containment, line)) {
    const auto f = split(line);
    const int e = std::stoi(f[0]);
    const double depth = std::stod(f[1]);
    const double t = std::stod(f[2]);
    if (t < 0.2 || t > 0.8) continue;  // the halo matters mid-range; surface/peak are core-dominated
    if (e != 70 && e != 100 && e != 150 && e != 200 && e != 230) continue;
    std::ostringstream name;
    name << dir << "dcpt-v5-water-sigma/sigma_E" << std::setw(3) << std::setfill('0') << e << ".csv";
    std::ifstream sigma_file(name.str());
    std::string s_line;
    std::getline(sigma_file, s_line);
    double prev_d = -1.0, prev_x = 0.0, prev_y = 0.0, sx = 0.0, sy = 0.0;
    while (std::getline(sigma_file, s_line)) {
      const auto g = split(s_line);
      const double d = std::stod(g[0]), x = std::stod(g[2]), y = std::stod(g[3]);
      if (d >= depth && prev_d >= 0.0) {
        const double u = (depth - prev_d) / (d - prev_d);
        sx = prev_x + u * (x - prev_x);
        sy = prev_y + u * (y - prev_y);
        break;
      }
      prev_d = d, prev_x = x, prev_y = y;
    }
    ASSERT_GT(sx, 0.0) << e << " MeV " << depth << " mm";
    const double surface_energy = residual_energy_mev(
        e == 70 ? 70.138449 : e == 100 ? 100.1674 : e == 150 ? 150.1419 : e == 200 ? 200.0842 : 230.0429,
        600.0 * 1.20479e-3 * 0.884);
    const NuclearHalo halo(surface_energy, HaloModel::kMcsquareFit);
    const double w = halo.weight_fraction(depth);
    const double sh = halo.sigma_mm(depth);
    for (const auto& [half_width, column] : {std::pair<double, int>{20.0, 3}, {40.0, 4}}) {
      auto inside = [&](double s) { return std::erf(half_width / (std::sqrt(2.0) * s)); };
      const double model_outside = 1.0 - ((1.0 - w) * inside(sx) * inside(sy) + w * inside(sh) * inside(sh));
      const double mc_outside = std::stod(f[static_cast<std::size_t>(column)]);
      EXPECT_NEAR(model_outside, mc_outside, 0.45 * mc_outside + 0.002)
          << e << " MeV, depth " << depth << " mm, square " << 2 * half_width << " mm";
      ++compared;
    }
  }
  EXPECT_GE(compared, 25);
}

TEST(NuclearHalo, InvalidDepthOrEnergyIsInputError) {
  const NuclearHalo halo(150.0, HaloModel::kSoukup2005);
  for (double bad : {-1.0, std::nan(""), 2.0 * halo.csda_range_mm()}) {
    try {
      (void)halo.weight_fraction(bad);
      ADD_FAILURE() << "no throw for " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("WEPL"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("150 MeV"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)halo.sigma_mm(-0.5), InputError);
  EXPECT_THROW((void)halo.added_sigma_mm(-0.5), InputError);
  try {
    (void)halo.sigma_with_core_mm(50.0, -1.0);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("core sigma -1 mm"), std::string::npos) << e.what();
  }
  try {
    (void)NuclearHalo(400.0, HaloModel::kMcsquareFit);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("400 MeV"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[10, 300] MeV"), std::string::npos) << e.what();
  }
  try {
    (void)NuclearHalo(260.0, HaloModel::kSoukup2005);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("soukup-2005"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("260 MeV"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[10, 250] MeV"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace protondose::physics
