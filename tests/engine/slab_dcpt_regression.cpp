// Regression against the MCsquare reference slab_dcpt (shared/reference/README.md):
// the water box with 20 mm slabs 20–40 mm below the surface, bone (HU 1300) for
// x < 0 and lung (HU −720) for x ≥ 0; layers 150 and 120 MeV, 11 × 11 spots on
// a 5 mm grid, 2 MU each. CPU backend, CT grid, dose to water as the MC.
#include <gtest/gtest.h>

#include <tuple>
#include <cstdio>

#include "protondose/compare/gamma.h"
#include "protondose/engine/dose_engine.h"
#include "reference_case.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::Volume;

namespace {

const pt::EngineCase& slab_case() {
  static const pt::EngineCase c = pt::compute_reference_case("slab_dcpt");
  return c;
}

double r80_of_150_mev_peak(const std::vector<pt::DepthSample>& p) {
  // The 150 MeV layer's peak lies deeper than the 120 MeV one on every profile.
  std::vector<pt::DepthSample> q;
  for (const auto& s : p)
    if (s.depth_mm >= 125) q.push_back(s);
  return pt::distal_depth_mm(q, 0.8);
}

}  // namespace

TEST(SlabDcptRegression, Gamma2Percent2MillimetreAtLeast95Percent) {
  const pt::EngineCase& c = slab_case();
  ASSERT_EQ(c.mc.grid, c.result.dose_gy.grid);
  for (double crit : {2.0, 3.0, 1.0}) {
    protondose::compare::GammaOptions g;
    g.dose_criterion_percent = crit;
    g.distance_mm = crit;
    g.threshold_percent = 10;
    g.keep_gamma_volume = crit == 2.0;
    const auto r = protondose::compare::gamma_3d(c.mc, c.result.dose_gy, g);
    std::printf("gamma %.0f%%/%.0fmm: %.2f %% of %zu voxels pass (mean %.3f, p95 %.2f, max %.2f)\n", crit, crit,
                r.pass_rate_percent, r.evaluated_voxels, r.mean_gamma, r.p95_gamma, r.max_gamma);
    ASSERT_GT(r.evaluated_voxels, 10000u);
    if (crit == 2.0) {
      // Where it fails: count failing voxels by region (behind bone, behind lung, the interface).
      ASSERT_TRUE(r.gamma.has_value());
      std::size_t bone = 0, lung = 0, interface = 0, other = 0;
      for (int k = 0; k < c.mc.grid.size[2]; ++k)
        for (int j = 0; j < c.mc.grid.size[1]; ++j)
          for (int i = 0; i < c.mc.grid.size[0]; ++i) {
            const float gv = r.gamma->data[c.mc.grid.index(i, j, k)];
            if (gv <= 1.0f) continue;
            const double x = c.mc.grid.position_mm(i, j, k)[0];
            (std::abs(x) <= 6 ? interface : x < 0 ? bone : x > 0 ? lung : other)++;
          }
      std::printf("  failing voxels: |x| <= 6 mm (bone/lung interface) %zu, bone side %zu, lung side %zu\n", interface,
                  bone, lung);
      EXPECT_GE(r.pass_rate_percent, 95.0);
    }
  }
}

TEST(SlabDcptRegression, RangesBehindBoneAndLungFollowTheSlabWet) {
  const pt::EngineCase& c = slab_case();
  for (const auto& [name, x_lo, x_hi] : {std::tuple{"bone", -16.0, -8.0}, std::tuple{"lung", 8.0, 16.0}}) {
    const auto mc = pt::depth_profile(c.mc, -100, x_lo, x_hi, -4, 4);
    const auto eng = pt::depth_profile(c.result.dose_gy, -100, x_lo, x_hi, -4, 4);
    const double r_mc = r80_of_150_mev_peak(mc), r_eng = r80_of_150_mev_peak(eng);
    std::printf("R80 (150 MeV) behind %s: MC %.2f mm, engine %.2f mm, delta %+.2f mm\n", name, r_mc, r_eng,
                r_eng - r_mc);
    ASSERT_GT(r_mc, 140.0);  // README: 147.62 (bone) / 171.83 (lung)
    EXPECT_NEAR(r_eng, r_mc, 1.0) << name;
  }
}

TEST(SlabDcptRegression, MaximumAndIntegralDose) {
  const pt::EngineCase& c = slab_case();
  const pt::DoseTotals t = pt::dose_totals(c.mc, c.result.dose_gy, c.result.max_dose_gy);
  const double mc_max = t.mc_max_gy, mc_sum = t.mc_sum_gy, eng_sum = t.engine_sum_gy;
  ASSERT_GT(mc_max, 0.1);  // README: 0.1499 Gy
  EXPECT_NEAR(c.result.max_dose_gy / mc_max, 1.0, 0.05);
  EXPECT_NEAR(eng_sum / mc_sum, 1.0, 0.03);
}
