#include "protondose/compare/dose_difference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "protondose/core/error.h"
#include "test_support.h"

namespace protondose::compare {
namespace {

using testing::cube_grid;
using testing::fill;

template <class E, class F>
std::string expect_throw_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

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
  const auto msg = expect_throw_message<InputError>([&] { dose_difference(zero, zero); });
  EXPECT_NE(msg.find("zero everywhere"), std::string::npos) << msg;
}

TEST(DoseDifference, ThresholdOutOfRangeIsAConfigError) {
  const Volume<float> ref(cube_grid(3, 1.0), 1.0f);
  DoseDifferenceOptions o;
  o.threshold_percent = 100.0;
  const auto msg = expect_throw_message<ConfigError>([&] { dose_difference(ref, ref, o); });
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
  const auto msg = expect_throw_message<InputError>([&] { dose_profile(dose, {0, 0, 0}, {1, 0, 0}, 0.0); });
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

TEST(DistalFalloff, ProfileEndingBeforeTheFalloffIsAnInputError) {
  std::vector<ProfilePoint> profile{{0, 0.5}, {1, 1.0}, {2, 0.9}, {3, 0.5}};
  const auto msg = expect_throw_message<InputError>([&] { distal_falloff(profile); });
  EXPECT_NE(msg.find("does not fall below 20 %"), std::string::npos) << msg;
}

}  // namespace
}  // namespace protondose::compare
