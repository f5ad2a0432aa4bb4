// Regression against the MCsquare reference water_dcpt (shared/reference/README.md):
// a 200 × 250 × 200 mm water box, one gantry-0 beam of 3 layers (180, 140,
// 100 MeV), 9 × 9 spots on a 6 mm grid, 1 MU each. CPU backend, CT grid.
#include <gtest/gtest.h>

#include <cstdio>

#include "protondose/compare/gamma.h"
#include "protondose/engine/dose_engine.h"
#include "reference_case.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::Volume;

namespace {

const pt::EngineCase& water_case() {
  static const pt::EngineCase c = pt::compute_reference_case("water_dcpt");
  return c;
}

}  // namespace

TEST(WaterDcptRegression, R80OnTheAxisWithinHalfAMillimetreOfMonteCarlo) {
  const pt::EngineCase& c = water_case();
  ASSERT_EQ(c.mc.grid, c.result.dose_gy.grid);
  const auto mc = pt::depth_profile(c.mc, -100, -2, 2, -2, 2);
  const auto eng = pt::depth_profile(c.result.dose_gy, -100, -2, 2, -2, 2);
  for (std::size_t i = 0; i < mc.size(); i += 5)
    std::printf("  depth %6.1f mm  MC %.5f  engine %.5f  ratio %.4f\n", mc[i].depth_mm, mc[i].dose_gy, eng[i].dose_gy,
                mc[i].dose_gy > 0 ? eng[i].dose_gy / mc[i].dose_gy : 0.0);
  // The distal fall-off of the deepest (180 MeV) layer: R80 of the peak beyond 150 mm.
  const auto deep = [](const std::vector<pt::DepthSample>& p) {
    std::vector<pt::DepthSample> q;
    for (const auto& s : p)
      if (s.depth_mm >= 150) q.push_back(s);
    return q;
  };
  const double r80_mc = pt::distal_depth_mm(deep(mc), 0.8), r80_eng = pt::distal_depth_mm(deep(eng), 0.8);
  std::printf("R80: MC %.2f mm, engine %.2f mm, delta %+.2f mm\n", r80_mc, r80_eng, r80_eng - r80_mc);
  ASSERT_GT(r80_mc, 200.0);  // the 180 MeV peak (README: 216.73 mm)
  EXPECT_NEAR(r80_eng, r80_mc, 0.5);
}

TEST(WaterDcptRegression, PlateauDoseOnTheAxisWithinTwoPercent) {
  const pt::EngineCase& c = water_case();
  const auto mc = pt::depth_profile(c.mc, -100, -2, 2, -2, 2);
  const auto eng = pt::depth_profile(c.result.dose_gy, -100, -2, 2, -2, 2);
  int n = 0;
  double worst = 0;
  for (std::size_t i = 0; i < mc.size(); ++i) {
    // The entrance plateau of all three layers, and the plateau of the 180 MeV
    // layer alone between the 140 MeV fall-off and its own peak region.
    const bool entrance = mc[i].depth_mm >= 10 && mc[i].depth_mm <= 60;
    const bool deep = mc[i].depth_mm >= 152 && mc[i].depth_mm <= 195;
    if (!entrance && !deep) continue;
    ASSERT_GT(mc[i].dose_gy, 0.01);
    const double rel = eng[i].dose_gy / mc[i].dose_gy - 1;
    worst = std::max(worst, std::abs(rel));
    EXPECT_NEAR(rel, 0.0, 0.02) << "depth " << mc[i].depth_mm << " mm";
    ++n;
  }
  std::printf("plateau 10-60 and 152-195 mm: %d samples, worst deviation %.2f %%\n", n, 100 * worst);
  EXPECT_GE(n, 40);
}

TEST(WaterDcptRegression, Gamma2Percent2MillimetreAtLeast99Percent) {
  const pt::EngineCase& c = water_case();
  for (double crit : {2.0, 3.0, 1.0}) {
    protondose::compare::GammaOptions g;
    g.dose_criterion_percent = crit;
    g.distance_mm = crit;
    g.threshold_percent = 10;
    const auto r = protondose::compare::gamma_3d(c.mc, c.result.dose_gy, g);
    std::printf("gamma %.0f%%/%.0fmm: %.2f %% of %zu voxels pass (mean %.3f, max %.2f)\n", crit, crit,
                r.pass_rate_percent, r.evaluated_voxels, r.mean_gamma, r.max_gamma);
    ASSERT_GT(r.evaluated_voxels, 10000u);
    if (crit == 2.0) {
      EXPECT_GE(r.pass_rate_percent, 99.0);
    }
  }
}

TEST(WaterDcptRegression, MaximumAndIntegralDoseAgreeWithMonteCarlo) {
  const pt::EngineCase& c = water_case();
  const pt::DoseTotals t = pt::dose_totals(c.mc, c.result.dose_gy, c.result.max_dose_gy);
  const double mc_max = t.mc_max_gy, mc_sum = t.mc_sum_gy, eng_sum = t.engine_sum_gy;
  ASSERT_GT(mc_max, 0.05);  // README: 0.06299 Gy
  EXPECT_NEAR(c.result.max_dose_gy / mc_max, 1.0, 0.03);
  EXPECT_NEAR(eng_sum / mc_sum, 1.0, 0.02);
  EXPECT_LT(std::abs(c.result.energy.relative_difference()), c.result.energy_balance_tolerance);
}
