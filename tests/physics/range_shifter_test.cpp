#include "protondose/physics/range_shifter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "protondose/core/error.h"
#include "protondose/physics/range_energy.h"
#include "protondose/physics/spot_optics.h"

namespace protondose::physics {
namespace {

RangeShifter rs_3cm() { return {"RS_3CM", 34.3, pmma_range_shifter_material()}; }

// In-air emittance of IEC X at 150 MeV from the shared reference spot model
// (nozzle plane 600 mm upstream of the isocentre).
AxisEmittance reference_emittance_x(int nominal_energy_mev, double* mean_energy_mev) {
  std::ifstream in(std::string(PROTONDOSE_SHARED_DIR) + "/reference/spot_model_DCPT_ProBeam_v5.csv");
  std::string line;
  std::getline(in, line);  // header: nominal, mean, σE, %, p/MU, σx, σx', ρx, ...
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string f;
    double v[7];
    for (double& x : v) {
      std::getline(s, f, ',');
      x = std::stod(f);
    }
    if (static_cast<int>(v[0]) == nominal_energy_mev) {
      std::getline(s, f, ',');
      const double corr = std::stod(f);
      *mean_energy_mev = v[1];
      return {v[5], v[6], corr};
    }
  }
  ADD_FAILURE() << "energy " << nominal_energy_mev << " not in the reference spot model";
  return {};
}

TEST(RangeShifter, PmmaThicknessFollowsWetOverRsp) {
  const RangeShifter rs = rs_3cm();
  EXPECT_NEAR(rs.physical_thickness_mm(), 29.2, 1e-9);
  EXPECT_NEAR(pmma_range_shifter_material().radiation_length_g_cm2, 40.55, 0.05);
  const RangeShifterMaterial pc = polycarbonate_range_shifter_material();
  EXPECT_NEAR(pc.relative_stopping_power, 1.143, 0.002);
  EXPECT_NEAR(pc.density_g_cm3, 1.20, 1e-12);
}

TEST(RangeShifter, RemovesItsWaterEquivalentThickness) {
  const RangeShifter rs = rs_3cm();
  const double e_out = energy_after_range_shifter_mev(rs, 150.0);
  EXPECT_DOUBLE_EQ(e_out, residual_energy_mev(150.0, 34.3));
  EXPECT_NEAR(csda_range_mm(150.0) - csda_range_mm(e_out), 34.3, 1e-6);
  EXPECT_LT(e_out, 135.0);
  EXPECT_GT(e_out, 125.0);
}

TEST(RangeShifter, SpotWideningMatchesMcsquareReferenceAt150MeV) {
  // shared/reference/README.md: 150 MeV, RS_3CM (PMMA, 34.3 mm WET, 29.2 mm)
  // with its downstream face 135.9 mm upstream of the isocentre; MCsquare's σx
  // at the water surface (isocentre plane) goes from 4.11 mm to 4.74 mm.
  double mean_energy = 0.0;
  const AxisEmittance ex = reference_emittance_x(150, &mean_energy);
  const double sigma_air = sigma_in_air_mm(ex, 600.0);
  ASSERT_NEAR(sigma_air, 4.10, 0.01);
  const double added = range_shifter_added_variance_mm2(rs_3cm(), mean_energy, 135.9);
  const double sigma_with_rs = std::sqrt(sigma_air * sigma_air + added);
  std::cout << "[ RS_3CM  ] sigma_x at surface: " << sigma_air << " -> " << sigma_with_rs
            << " mm (MCsquare 4.11 -> 4.74 mm)\n";
  EXPECT_NEAR(sigma_with_rs, 4.74, 0.10);
  // The differential-Highland option gives a similar widening.
  const double added_dh = range_shifter_added_variance_mm2(
      rs_3cm(), mean_energy, 135.9, ScatteringOptions::differential_highland(mean_energy));
  std::cout << "[ RS_3CM  ] differential Highland: " << std::sqrt(sigma_air * sigma_air + added_dh) << " mm\n";
  EXPECT_NEAR(std::sqrt(sigma_air * sigma_air + added_dh), 4.74, 0.15);
  const double added_dm = range_shifter_added_variance_mm2(
      rs_3cm(), mean_energy, 135.9, ScatteringOptions::differential_moliere(mean_energy));
  std::cout << "[ RS_3CM  ] differential Moliere: " << std::sqrt(sigma_air * sigma_air + added_dm) << " mm\n";
  EXPECT_LT(added_dm, added);  // X_S > X0: less scattering than the default
  EXPECT_NEAR(std::sqrt(sigma_air * sigma_air + added_dm), 4.74, 0.25);
}

TEST(RangeShifter, AddedVarianceGrowsWithTheAirGap) {
  const RangeShifter rs = rs_3cm();
  const FermiEygesMoments exit = range_shifter_exit_moments(rs, 150.0);
  ASSERT_GT(exit.a0_rad2, 0.0);
  EXPECT_DOUBLE_EQ(range_shifter_added_variance_mm2(rs, 150.0, 0.0), exit.a2_mm2);
  const double v100 = range_shifter_added_variance_mm2(rs, 150.0, 100.0);
  const double v300 = range_shifter_added_variance_mm2(rs, 150.0, 300.0);
  EXPECT_NEAR(v300, exit.a2_mm2 + 2 * exit.a1_rad_mm * 300.0 + exit.a0_rad2 * 9e4, 1e-12);
  EXPECT_GT(v300, 4.0 * v100);  // dominated by θ²d² at large gaps
  // Projected angle behind 29 mm PMMA at ~143 MeV: ~15 mrad (14.1/pv · sqrt(ρt/X0)).
  EXPECT_NEAR(exit.sigma_theta_rad(), 14.1 / proton_pv_mev(142.5) * std::sqrt(1.19 * 2.92 / 40.55), 0.5e-3);
  // Lower energy scatters more.
  EXPECT_GT(range_shifter_added_variance_mm2(rs, 100.0, 100.0), 1.5 * v100);
}

TEST(RangeShifter, EqualWetLexanAndPmmaDifferByAFewPercent) {
  const RangeShifter pmma_rs = rs_3cm();
  const RangeShifter pc_rs{"RS_LEXAN", 34.3, polycarbonate_range_shifter_material()};
  const double a = range_shifter_added_variance_mm2(pmma_rs, 150.0, 135.9);
  const double b = range_shifter_added_variance_mm2(pc_rs, 150.0, 135.9);
  EXPECT_NEAR(b / a, 1.0, 0.05);
  EXPECT_NE(a, b);
}

TEST(RangeShifter, ShifterThatStopsTheBeamIsInputError) {
  const RangeShifter thick{"RS_THICK", 60.0, pmma_range_shifter_material()};
  try {
    (void)energy_after_range_shifter_mev(thick, 70.0);
    FAIL() << "no throw";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("RS_THICK"), std::string::npos) << msg;
    EXPECT_NE(msg.find("60 mm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("70 MeV"), std::string::npos) << msg;
  }
}

TEST(RangeShifter, InvalidParametersAreInputErrors) {
  RangeShifter rs = rs_3cm();
  rs.water_equivalent_thickness_mm = -1.0;
  try {
    validate(rs);
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("water-equivalent thickness -1 mm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("RS_3CM"), std::string::npos) << e.what();
  }
  rs = rs_3cm();
  rs.material.radiation_length_g_cm2 = 0.0;
  EXPECT_THROW(validate(rs), InputError);
  rs = rs_3cm();
  rs.material.scattering_length_g_cm2 = -3.0;
  EXPECT_THROW(validate(rs), InputError);
  rs = rs_3cm();
  rs.material.relative_stopping_power = std::nan("");
  EXPECT_THROW(validate(rs), InputError);
  rs = rs_3cm();
  rs.material.density_g_cm3 = 0.0;
  EXPECT_THROW((void)range_shifter_exit_moments(rs, 150.0), InputError);
  try {
    (void)range_shifter_added_variance_mm2(rs_3cm(), 150.0, -5.0);
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("distance -5 mm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace protondose::physics
