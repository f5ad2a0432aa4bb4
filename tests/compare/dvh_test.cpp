#include "protondose/compare/dvh.h"

#include <gtest/gtest.h>

#include "protondose/core/error.h"
#include "test_support.h"

namespace protondose::compare {
namespace {

using testing::cube_grid;
using testing::fill;

// Dose linear in y, D = a·y with a = 0.1 Gy/mm, on 1 mm voxels; the box
// structure spans voxels j = 10 … 49, i.e. y ∈ [9.5, 49.5] mm, D ∈ [0.95, 4.95] Gy.
// For a dose linear across a box, the volume fraction receiving at least D is
// (D_max − D)/(D_max − D_min), so D_x = D_max − x/100·(D_max − D_min):
// D2 = 4.87, D50 = 2.95, D95 = 1.15, D98 = 1.03 Gy. The voxel doses sit at the
// centres of their volume shares, so the interpolated D_x is exact.
// V95 of a 4 Gy prescription: fraction with D >= 3.8 Gy = (4.95 − 3.8)/4 = 28.75 %,
// which on the voxel grid is the 11 slices j >= 38 (D >= 3.85 Gy) of 40: 27.5 %.
TEST(Dvh, LinearRampInABoxGivesAnalyticDoseMetrics) {
  const Grid3 g = cube_grid(60, 1.0);
  const auto dose = fill(g, [](const Vec3& p) { return 0.1 * p[1]; });
  Volume<std::uint8_t> mask(g, 0);
  for (int k = 20; k < 30; ++k)
    for (int j = 10; j < 50; ++j)
      for (int i = 5; i < 15; ++i) mask.at(i, j, k) = 1;
  DvhOptions o;
  o.prescription_gy = 4.0;
  const Dvh dvh = compute_dvh(dose, mask, "Box", o);
  EXPECT_EQ(dvh.roi_name, "Box");
  EXPECT_EQ(dvh.voxels, 4000u);
  EXPECT_NEAR(dvh.volume_cc, 4.0, 1e-12);
  EXPECT_NEAR(dvh.mean_gy, 2.95, 1e-5);
  EXPECT_NEAR(dvh.min_gy, 1.0, 1e-6);
  EXPECT_NEAR(dvh.max_gy, 4.9, 1e-6);
  EXPECT_NEAR(dvh.d2_gy, 4.87, 1e-5);
  EXPECT_NEAR(dvh.d50_gy, 2.95, 1e-5);
  EXPECT_NEAR(dvh.d95_gy, 1.15, 1e-5);
  EXPECT_NEAR(dvh.d98_gy, 1.03, 1e-5);
  EXPECT_NEAR(dvh.v95_percent, 27.5, 1e-9);
  // Cumulative curve: 100 % at 0 Gy, monotone, 0 % above the maximum.
  ASSERT_GT(dvh.cumulative.size(), 100u);
  EXPECT_DOUBLE_EQ(dvh.cumulative.front().volume_percent, 100.0);
  EXPECT_DOUBLE_EQ(dvh.cumulative.back().volume_percent, 0.0);
  for (std::size_t n = 1; n < dvh.cumulative.size(); ++n)
    EXPECT_LE(dvh.cumulative[n].volume_percent, dvh.cumulative[n - 1].volume_percent);
}

TEST(Dvh, V95DefaultsToTheMaximumDose) {
  const Grid3 g = cube_grid(4, 2.0);
  Volume<float> dose(g, 1.0f);
  dose.at(0, 0, 0) = 2.0f;
  const Volume<std::uint8_t> mask(g, 1);
  const Dvh dvh = compute_dvh(dose, mask, "All");
  EXPECT_DOUBLE_EQ(dvh.prescription_gy, 2.0);
  EXPECT_NEAR(dvh.v95_percent, 100.0 / 64.0, 1e-12);
}

TEST(Dvh, EmptyStructureIsAnInputErrorNamingTheRoi) {
  const Grid3 g = cube_grid(4, 1.0);
  const Volume<float> dose(g, 1.0f);
  const Volume<std::uint8_t> mask(g, 0);
  try {
    compute_dvh(dose, mask, "PTV_70");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ROI 'PTV_70'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no voxel"), std::string::npos) << e.what();
  }
}

TEST(Dvh, MaskOnAnotherGridIsAnInputError) {
  const Volume<float> dose(cube_grid(4, 1.0), 1.0f);
  const Volume<std::uint8_t> mask(cube_grid(4, 2.0), 1);
  try {
    compute_dvh(dose, mask, "Body");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not on the dose grid"), std::string::npos) << e.what();
  }
}

TEST(Dvh, NegativePrescriptionIsAConfigError) {
  const Grid3 g = cube_grid(2, 1.0);
  DvhOptions o;
  o.prescription_gy = -1.0;
  try {
    compute_dvh(Volume<float>(g, 1.0f), Volume<std::uint8_t>(g, 1), "CTV", o);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("prescription -1 Gy"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace protondose::compare
