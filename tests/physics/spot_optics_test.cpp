#include "expect_error.h"
#include "protondose/physics/spot_optics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "protondose/core/error.h"

namespace protondose::physics {
namespace {

using protondose::testing::message_of;

// DCPT v5, 70 MeV, IEC X at the plane 600 mm upstream of the isocentre
// (DCPT_beam_model__v5.csv); in-air σ at the isocentre 5.9707 mm
// (shared/reference/spot_model_DCPT_ProBeam_v5.csv).
constexpr AxisEmittance kDcpt70X{4.186392496, 0.00678519595, 0.04545762851};

TEST(SpotOptics, DriftFollowsTheEmittanceFormula) {
  EXPECT_DOUBLE_EQ(sigma_in_air_mm(kDcpt70X, 0.0), kDcpt70X.sigma_mm);
  const double s = 600.0;
  const double expected = std::sqrt(kDcpt70X.sigma_mm * kDcpt70X.sigma_mm +
                                    2.0 * kDcpt70X.correlation * kDcpt70X.sigma_mm * kDcpt70X.sigma_theta_rad * s +
                                    kDcpt70X.sigma_theta_rad * kDcpt70X.sigma_theta_rad * s * s);
  EXPECT_NEAR(sigma_in_air_mm(kDcpt70X, s), expected, 1e-12);
  EXPECT_NEAR(sigma_in_air_mm(kDcpt70X, s), 5.9707, 5e-4);
  EXPECT_NEAR(sigma_in_air_at_z_from_isocentre_mm(kDcpt70X, 600.0, 0.0), 5.9707, 5e-4);
  // z is measured downstream from the isocentre: 100 mm past it is 700 mm from the plane.
  EXPECT_DOUBLE_EQ(sigma_in_air_at_z_from_isocentre_mm(kDcpt70X, 600.0, 100.0),
                   sigma_in_air_mm(kDcpt70X, 700.0));
  EXPECT_DOUBLE_EQ(sigma_in_air_at_z_from_isocentre_mm(kDcpt70X, 600.0, -600.0), kDcpt70X.sigma_mm);
}

TEST(SpotOptics, ConvergingBeamHasItsWaistDownstream) {
  // ρ < 0: the beam narrows first; the waist lies at s* = −ρσ0/σθ with σ = σ0·sqrt(1 − ρ²).
  const AxisEmittance e{4.0, 0.004, -0.5};
  const double s_waist = 0.5 * 4.0 / 0.004;
  EXPECT_NEAR(sigma_in_air_mm(e, s_waist), 4.0 * std::sqrt(1.0 - 0.25), 1e-12);
  EXPECT_LT(sigma_in_air_mm(e, s_waist), sigma_in_air_mm(e, s_waist - 50.0));
  EXPECT_LT(sigma_in_air_mm(e, s_waist), sigma_in_air_mm(e, s_waist + 50.0));
}

TEST(SpotOptics, RescalingSigma0HitsTheRequestedSizeAtTheIsocentre) {
  for (double target : {4.5, 5.9707, 8.0}) {
    const AxisEmittance r = with_sigma_at_isocentre(kDcpt70X, 600.0, target);
    EXPECT_NEAR(sigma_in_air_mm(r, 600.0), target, 1e-12) << target;
    EXPECT_EQ(r.sigma_theta_rad, kDcpt70X.sigma_theta_rad);
    EXPECT_EQ(r.correlation, kDcpt70X.correlation);
    EXPECT_GT(r.sigma_mm, 0.0);
  }
  // The model's own size gives back the model's σ0.
  const double own = sigma_in_air_mm(kDcpt70X, 600.0);
  EXPECT_NEAR(with_sigma_at_isocentre(kDcpt70X, 600.0, own).sigma_mm, kDcpt70X.sigma_mm, 1e-12);
}

TEST(SpotOptics, UnreachableSpotSizeIsInputErrorWithTheSmallestReachable) {
  // σθ·L = 4.07 mm with ρ > 0: no σ0 > 0 gives less than that at the isocentre.
  const std::string m = message_of<InputError>([] { with_sigma_at_isocentre(kDcpt70X, 600.0, 2.0); });
  EXPECT_NE(m.find("sigma 2 mm"), std::string::npos) << m;
  EXPECT_NE(m.find("4.07"), std::string::npos) << m;
  EXPECT_THROW(with_sigma_at_isocentre(kDcpt70X, 600.0, -1.0), InputError);
}

TEST(SpotOptics, UnphysicalCorrelationIsNumericalError) {
  const AxisEmittance bad{1.0, 0.01, -3.0};
  EXPECT_NE(message_of<NumericalError>([&] { sigma_in_air_mm(bad, 100.0); }).find("negative variance"),
            std::string::npos);
}

TEST(SpotOptics, FwhmConstantAndPolicyNames) {
  EXPECT_NEAR(kFwhmPerSigma, 2.0 * std::sqrt(2.0 * std::log(2.0)), 1e-15);
  EXPECT_STREQ(spot_size_policy_name(SpotSizePolicy::kBeamModel), "beam-model");
  EXPECT_STREQ(spot_size_policy_name(SpotSizePolicy::kPlanSpotSizeAtIsocentre),
               "plan-spot-size-at-isocentre");
}

}  // namespace
}  // namespace protondose::physics
