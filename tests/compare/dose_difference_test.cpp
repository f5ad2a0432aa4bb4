#include "expect_error.h"
#include "protondose/compare/dose_difference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "protondose/core/error.h"
#include "test_support.h"

namespace protondose::compare {
namespace {

using testing::cube_grid;
using testing::fill;

using protondose::testing::message_of;

// Reference 1 Gy + 0.1 Gy/mm along x (x = 0 … 9 mm: 1.0 … 1.9 Gy), evaluated
// = reference + 0.02 Gy for x < 5 mm and − 0.04 Gy from x = 5 mm: with the
// threshold at 50 % of 1.9 Gy every voxel counts, half of each sign.
TEST(DoseDifference, StatisticsOfAKnownDifference) {
  const Grid3 g = cube_grid(10, 1.0);
  const auto ref = fill(g, [](const Vec3& p) { return 1.0 + 0.1 * p[0]; });
  const auto eval = fill(g, [](const Vec3& p) { return 1.0 + 0.1 * p[0] + (p[0] < 4.5 ? 0.02 : -0.04); });
  DoseDifferenceOptions o;
  o.threshold_percent = 50.0;
  const DoseDifferenceResult r = dose_difference(ref, eval, o);
  EXPECT_EQ(r.voxels, 1000u);
  EXPECT_NEAR(r.normalisation_dose_gy, 1.9, 1e-6);
  EXPECT_NEAR(r.mean_gy, -0.01, 1e-6);
  EXPECT_NEAR(r.rms_gy, std::sqrt(0.5 * 0.02 * 0.02 + 0.5 * 0.04 * 0.04), 1e-6);
  EXPECT_NEAR(r.max_gy, 0.02, 1e-6);
  EXPECT_NEAR(r.min_gy, -0.04, 1e-6);
  EXPECT_NEAR(r.max_abs_gy, 0.04, 1e-6);
  EXPECT_NEAR(r.mean_percent, -100 * 0.01 / 1.9, 1e-4);
  EXPECT_NEAR(r.max_abs_percent, 100 * 0.04 / 1.9, 1e-4);
  // A higher threshold (80 % of 1.9 Gy = 1.52 Gy) keeps x >= 6 mm only: all −0.04 Gy.
  o.threshold_percent = 80.0;
  const DoseDifferenceResult high = dose_difference(ref, eval, o);
  EXPECT_EQ(high.voxels, 400u);
  EXPECT_NEAR(high.mean_gy, -0.04, 1e-6);
}

TEST(DoseDifference, ZeroReferenceIsAnInputError) {
  const Volume<float> zero(cube_grid(3, 1.0), 0.0f);
  const auto msg = message_of<InputError>([&] { dose_difference(zero, zero); });
  EXPECT_NE(msg.find("zero everywhere"), std::string::npos) << msg;
}

TEST(DoseDifference, ThresholdOutOfRangeIsAConfigError) {
  const Volume<float> ref(cube_grid(3, 1.0), 1.0f);
  DoseDifferenceOptions o;
  o.threshold_percent = 100.0;
  const auto msg = message_of<ConfigError>([&] { dose_difference(ref, ref, o); });
  EXPECT_NE(msg.find("threshold 100 %"), std::string::npos) << msg;
}

TEST(DoseProfile, SamplesALinearFieldExactlyIncludingBothEnds) {
  const Grid3 g = cube_grid(20, 2.0, {-19, -19, -19});
  const auto dose = fill(g, [](const Vec3& p) { return 2.0 + 0.05 * p[1]; });
  const auto profile = dose_profile(dose, {0, -10, 0}, {0, 10, 0}, 3.0);
  ASSERT_EQ(profile.size(), 8u);  // 0, 3, …, 18, then 20
  EXPECT_DOUBLE_EQ(profile.back().distance_mm, 20.0);
  for (const auto& p : profile) EXPECT_NEAR(p.dose_gy, 2.0 + 0.05 * (-10 + p.distance_mm), 1e-5);
}

TEST(DoseProfile, ZeroStepIsAnInputError) {
  const Volume<float> dose(cube_grid(3, 1.0), 1.0f);
  const auto msg = message_of<InputError>([&] { dose_profile(dose, {0, 0, 0}, {1, 0, 0}, 0.0); });
  EXPECT_NE(msg.find("step 0 mm"), std::string::npos) << msg;
}

// A plateau of 1 Gy up to 50 mm falling linearly to 0 at 60 mm: the dose is
// 0.8 Gy at 52 mm and 0.2 Gy at 58 mm.
TEST(DistalFalloff, LinearFalloffGivesAnalyticR80AndR20) {
  std::vector<ProfilePoint> profile;
  for (double z = 0; z <= 80; z += 0.7)
    profile.push_back({z, z <= 50 ? 1.0 : std::max(0.0, 1.0 - (z - 50) / 10.0)});
  const DistalFalloff f = distal_falloff(profile);
  EXPECT_DOUBLE_EQ(f.max_dose_gy, 1.0);
  EXPECT_NEAR(f.r80_mm, 52.0, 1e-9);
  EXPECT_NEAR(f.r20_mm, 58.0, 1e-9);
}

// Two peaks: 1 Gy at 20 mm, a dip to 0.1 Gy at 30 mm, a distal peak of 0.9 Gy
// falling linearly from 40 mm to 0 at 50 mm. R80 of the 1 Gy maximum (0.8 Gy)
// is on the distal peak's edge, at 40 + 10·(0.1/0.9) mm; R20 at 40 + 10·(0.7/0.9).
TEST(DistalFalloff, DipBetweenPeaksIsNotTheFalloff) {
  std::vector<ProfilePoint> profile;
  for (double z = 0; z <= 60; z += 0.5) {
    double d = 0;
    if (z <= 20) d = 0.5 + 0.5 * z / 20;
    else if (z <= 30) d = 1.0 - 0.9 * (z - 20) / 10;
    else if (z <= 40) d = 0.1 + 0.8 * (z - 30) / 10;
    else d = std::max(0.0, 0.9 * (1 - (z - 40) / 10));
    profile.push_back({z, d});
  }
  const DistalFalloff f = distal_falloff(profile);
  EXPECT_NEAR(f.max_position_mm, 20.0, 1e-9);
  EXPECT_NEAR(f.r80_mm, 40 + 10 * 0.1 / 0.9, 1e-9);
  EXPECT_NEAR(f.r20_mm, 40 + 10 * 0.7 / 0.9, 1e-9);
}

TEST(DistalFalloff, ProfileEndingBeforeTheFalloffIsAnInputError) {
  std::vector<ProfilePoint> profile{{0, 0.5}, {1, 1.0}, {2, 0.9}, {3, 0.5}};
  const auto msg = message_of<InputError>([&] { distal_falloff(profile); });
  EXPECT_NE(msg.find("does not fall below 20 %"), std::string::npos) << msg;
}

}  // namespace
}  // namespace protondose::compare

namespace protondose::compare {
namespace {

TEST(BeamAxis, GantryZeroTravelsPosteriorAndNinetyTravelsRightward) {
  const Vec3 d0 = beam_direction_hfs(0.0, 0.0);
  EXPECT_NEAR(d0[0], 0.0, 1e-12);
  EXPECT_NEAR(d0[1], 1.0, 1e-12);
  const Vec3 d90 = beam_direction_hfs(90.0, 0.0);
  EXPECT_NEAR(d90[0], -1.0, 1e-12);
  EXPECT_NEAR(d90[1], 0.0, 1e-12);
  try {
    beam_direction_hfs(0.0, 10.0);
    FAIL() << "expected UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("couch angle 10 deg"), std::string::npos) << e.what();
  }
}

TEST(BeamAxis, DepthProfileIsClippedToTheGridAndMeasuredFromTheIsocentre) {
  // Grid centres y = −10 … 9 mm (extent −10.5 … 9.5); dose = 1 + 0.01·y.
  const Grid3 g = testing::cube_grid(20, 1.0, {-10, -10, -10});
  const auto dose = testing::fill(g, [](const Vec3& p) { return 1.0 + 0.01 * p[1]; });
  const auto profile = depth_profile_along_beam(dose, {0, 2, 0}, {0, 3, 0}, 0.5);
  ASSERT_GE(profile.size(), 2u);
  EXPECT_NEAR(profile.front().distance_mm, -12.5, 1e-9);  // y = −10.5
  EXPECT_NEAR(profile.back().distance_mm, 7.5, 1e-9);     // y = 9.5
  for (const auto& p : profile) {
    const double y = std::clamp(2.0 + p.distance_mm, -10.0, 9.0);  // edge voxels held constant
    EXPECT_NEAR(p.dose_gy, 1.0 + 0.01 * y, 1e-6);
  }
  EXPECT_THROW(depth_profile_along_beam(dose, {50, 50, 0}, {0, 1, 0}, 0.5), InputError);
}

}  // namespace
}  // namespace protondose::compare
