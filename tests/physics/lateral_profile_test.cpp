#include "protondose/physics/lateral_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/physics/nuclear_halo.h"

namespace protondose::physics {
namespace {

constexpr CoreFitWeighting kWeightings[] = {CoreFitWeighting::kUniform, CoreFitWeighting::kInverseDose};

// A voxel-integrated Gaussian is exactly the fitted function: its own σ comes
// back whatever the window and the weighting, from σ below two voxels to the
// widest core of the reference (8.5 mm at the 230 MeV Bragg peak).
TEST(FittedCoreSigma, SingleGaussianGivesItsOwnSigma) {
  for (CoreFitWeighting weighting : kWeightings) {
    CoreFitOptions options;
    options.weighting = weighting;
    for (double sigma : {1.2, 3.5, 6.0, 8.5})
      EXPECT_NEAR(fitted_core_sigma_mm({{1.0, sigma}}, options), sigma, 1e-6)
          << sigma << " mm, " << core_fit_weighting_name(weighting);
  }
}

// The fitted σ is found to ~1e-8 mm (the residual is flat to rounding there).
TEST(FittedCoreSigma, WeightsNeedNotSumToOne) {
  const double unit = fitted_core_sigma_mm({{0.9, 4.0}, {0.1, 8.0}});
  EXPECT_NEAR(fitted_core_sigma_mm({{6.3, 4.0}, {0.7, 8.0}}), unit, 1e-7);
  // A component of weight 0 changes nothing.
  EXPECT_NEAR(fitted_core_sigma_mm({{0.9, 4.0}, {0.1, 8.0}, {0.0, 0.5}}), unit, 1e-7);
}

// A second Gaussian twice as wide as the core lies mostly inside the ±2.5σ
// window: the fit follows it part of the way, between the core σ and the rms
// of the whole profile (sqrt(0.9·16 + 0.1·64) = 4.56 mm).
TEST(FittedCoreSigma, NearCoreComponentWidensTheFit) {
  for (CoreFitWeighting weighting : kWeightings) {
    CoreFitOptions options;
    options.weighting = weighting;
    const double fitted = fitted_core_sigma_mm({{0.9, 4.0}, {0.1, 8.0}}, options);
    EXPECT_GT(fitted, 4.15) << core_fit_weighting_name(weighting);
    EXPECT_LT(fitted, std::sqrt(0.9 * 16.0 + 0.1 * 64.0)) << core_fit_weighting_name(weighting);
  }
}

// A halo 15 times wider than the core is nearly flat inside the window: the
// same 10 % of the integral moves the fit by less than 1 % of the core σ.
TEST(FittedCoreSigma, WideHaloBarelyMovesTheFit) {
  const double near = fitted_core_sigma_mm({{0.9, 4.0}, {0.1, 8.0}});
  const double wide = fitted_core_sigma_mm({{0.9, 4.0}, {0.1, 60.0}});
  EXPECT_GT(wide, 4.0);
  EXPECT_LT(wide, 4.04);
  EXPECT_LT(wide - 4.0, 0.25 * (near - 4.0));
}

TEST(FittedCoreSigma, RejectsBadComponents) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<LateralGaussian>> bad = {
      {}, {{-0.1, 4.0}}, {{1.0, 0.0}}, {{1.0, -2.0}}, {{nan, 4.0}}, {{1.0, nan}}, {{0.0, 4.0}, {0.0, 8.0}}};
  for (const auto& components : bad) EXPECT_THROW(fitted_core_sigma_mm(components), InputError);
  try {
    fitted_core_sigma_mm({{1.0, 4.0}, {-0.25, 8.0}});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("component 1"), std::string::npos) << what;
    EXPECT_NE(what.find("-0.25"), std::string::npos) << what;
    EXPECT_NE(what.find("≥ 0"), std::string::npos) << what;
  }
}

TEST(FittedCoreSigma, RejectsBadGridAndOptions) {
  const std::vector<LateralGaussian> gaussian = {{1.0, 4.0}};
  EXPECT_THROW(voxelise(gaussian, 0.0), InputError);
  EXPECT_THROW(voxelise(gaussian, 1.0, 0.5), InputError);
  CoreFitOptions window;
  window.window_sigmas = -2.5;
  CoreFitOptions weighting;
  weighting.weighting = static_cast<CoreFitWeighting>(7);
  for (const CoreFitOptions& options : {window, weighting})
    EXPECT_THROW(fitted_core_sigma_mm(gaussian, options), InputError);
  try {
    fitted_core_sigma_mm(gaussian, window);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("window -2.5"), std::string::npos) << e.what();
  }
}

// A profile sampled elsewhere (here: voxel centres on the axis, as on the
// engine's output grid) is fitted the same way; bad voxel rows are rejected.
TEST(FittedCoreSigma, VoxelProfileWithACentreOnTheAxis) {
  VoxelProfile profile;
  profile.voxel_mm = 1.0;
  profile.first_centre_mm = -40.0;
  for (int i = 0; i <= 80; ++i) {
    const double u = i - 40.0;
    profile.dose.push_back(0.5 * (std::erfc(-(u + 0.5) / (5.0 * std::sqrt(2.0))) -
                                  std::erfc(-(u - 0.5) / (5.0 * std::sqrt(2.0)))));
  }
  EXPECT_NEAR(fitted_core_sigma_mm(profile), 5.0, 1e-6);

  VoxelProfile empty = profile;
  empty.dose.clear();
  VoxelProfile negative = profile;
  negative.dose[3] = -1.0;
  VoxelProfile zero = profile;
  for (double& d : zero.dose) d = 0.0;
  VoxelProfile voxel = profile;
  voxel.voxel_mm = -1.0;
  for (const VoxelProfile& bad : {empty, negative, zero, voxel}) EXPECT_THROW(fitted_core_sigma_mm(bad), InputError);
  try {
    fitted_core_sigma_mm(negative);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("voxel 3"), std::string::npos) << e.what();
  }
}

// σ = 0.2 mm on 1 mm voxels: two voxels inside ±2.5σ, too few for the fit.
TEST(FittedCoreSigma, SigmaBelowTheVoxelIsANumericalError) {
  try {
    fitted_core_sigma_mm({{1.0, 0.2}});
    FAIL() << "expected NumericalError";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("voxels"), std::string::npos) << e.what();
  }
}

// A profile flatter than a Gaussian (σ 3.8248 mm convolved with a 4 mm box)
// on voxels centred on the axis: its fitted σ puts the ±2.5σ edge on the voxel
// centre at 10 mm, and the window alternates between including and excluding
// that voxel. The answer is the mean of the two fits, 4.000 mm, continuous with
// the neighbouring profiles (3.8240 and 3.8256 mm give 3.9994 and 4.0007 mm).
TEST(FittedCoreSigma, AlternatingWindowGivesTheMeanOfTheCycle) {
  const auto profile = [](double sigma_mm) {
    VoxelProfile p;
    p.voxel_mm = 1.0;
    p.first_centre_mm = -40.0;
    constexpr int kBoxSamples = 200;
    for (int i = 0; i <= 80; ++i) {
      const double u = i - 40.0;
      double dose = 0.0;
      for (int k = 0; k < kBoxSamples; ++k) {
        const double shift = -2.0 + 4.0 * (k + 0.5) / kBoxSamples;
        dose += 0.5 * (std::erfc(-(u + 0.5 - shift) / (sigma_mm * std::sqrt(2.0))) -
                       std::erfc(-(u - 0.5 - shift) / (sigma_mm * std::sqrt(2.0))));
      }
      p.dose.push_back(dose / kBoxSamples);
    }
    return p;
  };
  const double below = fitted_core_sigma_mm(profile(3.8240));
  const double cycling = fitted_core_sigma_mm(profile(3.8248));
  const double above = fitted_core_sigma_mm(profile(3.8256));
  EXPECT_NEAR(cycling, 4.0, 1e-4);
  EXPECT_GT(cycling, below);
  EXPECT_LT(cycling, above);
  EXPECT_LT(above - below, 2e-3);
}

// The spot profile: core and halo shares sum to 1; with kSoukup2005 the halo
// is the published composition sqrt(σ_core² + σ_N²).
TEST(SpotLateralProfile, CoreAndSoukupHaloShares) {
  const NuclearHalo halo(150.0, HaloModel::kSoukup2005);
  const double depth = 80.0, core = 4.5;
  const std::vector<LateralGaussian> profile = spot_lateral_profile(halo, depth, core);
  ASSERT_EQ(profile.size(), 2u);
  EXPECT_DOUBLE_EQ(profile[0].weight + profile[1].weight, 1.0);
  EXPECT_DOUBLE_EQ(profile[1].weight, halo.weight_fraction(depth));
  EXPECT_DOUBLE_EQ(profile[0].sigma_mm, core);
  EXPECT_NEAR(profile[1].sigma_mm, std::hypot(core, halo.added_sigma_mm(depth)), 1e-12);
  EXPECT_THROW(spot_lateral_profile(halo, -1.0, core), InputError);
  EXPECT_THROW(spot_lateral_profile(halo, depth, -1.0), InputError);
}

}  // namespace
}  // namespace protondose::physics
