#include "expect_error.h"
#include "protondose/physics/range_energy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "protondose/core/error.h"

namespace protondose::physics {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

/// Runs f, expects an exception of type E, returns its message.
using protondose::testing::message_of;

// NIST PSTAR CSDA ranges of protons in liquid water (g/cm²).
TEST(RangeEnergy, CsdaRangesMatchPstarWithinHalfAPercent) {
  const struct {
    double energy_mev, range_g_cm2;
  } pstar[] = {{70.0, 4.080}, {100.0, 7.718}, {150.0, 15.77}, {200.0, 25.96}, {230.0, 32.95}};
  for (const auto& p : pstar) {
    const double range_mm = csda_range_mm(p.energy_mev);
    EXPECT_NEAR(range_mm, 10.0 * p.range_g_cm2, 0.005 * 10.0 * p.range_g_cm2) << p.energy_mev << " MeV";
  }
  // Tabulated energies are reproduced exactly.
  EXPECT_NEAR(csda_range_mm(100.0), 77.18, 1e-9);
  EXPECT_NEAR(stopping_power_water_mev_cm2_g(100.0), 7.289, 1e-12);
}

TEST(RangeEnergy, TableIsSelfConsistentRangeEqualsIntegralOfInverseStoppingPower) {
  // R(E) = R(1 MeV) + ∫ dE / S(E), S interpolated log-log; Simpson in ln E.
  const double e0 = 1.0;
  double range_g_cm2 = pstar_water().csda_range_g_cm2(e0);
  double worst = 0.0, e_prev = e0;
  for (double e : {10.0, 50.0, 70.0, 100.0, 150.0, 200.0, 230.0, 250.0, 300.0}) {
    const int n = 400;
    const double a = std::log(e_prev), b = std::log(e), h = (b - a) / n;
    double s = 0.0;
    for (int k = 0; k <= n; ++k) {
      const double x = std::exp(a + k * h);
      const double w = (k == 0 || k == n) ? 1.0 : (k % 2 ? 4.0 : 2.0);
      s += w * x / stopping_power_water_mev_cm2_g(x);
    }
    range_g_cm2 += s * h / 3.0;
    e_prev = e;
    const double rel = std::abs(range_g_cm2 / pstar_water().csda_range_g_cm2(e) - 1.0);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 0.001) << e << " MeV";
  }
  RecordProperty("worst_relative_difference", std::to_string(worst));
}

TEST(RangeEnergy, InversionRoundTrips) {
  for (double e = 1.0; e <= 300.0; e *= 1.07) {
    EXPECT_NEAR(energy_from_csda_range_mev(csda_range_mm(e)), e, 1e-9 * e);
  }
  for (double r_mm : {0.5, 10.0, 40.8, 100.0, 329.0}) {
    EXPECT_NEAR(csda_range_mm(energy_from_csda_range_mev(r_mm)), r_mm, 1e-9 * r_mm);
  }
}

TEST(RangeEnergy, RangeIncreasesAndStoppingPowerDecreasesAboveThePeak) {
  double r_prev = 0.0, s_prev = 1e9;
  for (double e = 0.2; e <= 500.0; e *= 1.01) {
    const double r = csda_range_mm(e);
    const double s = stopping_power_water_mev_cm2_g(e);
    EXPECT_GT(r, r_prev) << e;
    EXPECT_LT(s, s_prev) << e;  // the stopping-power maximum lies at 80 keV
    r_prev = r;
    s_prev = s;
  }
}

TEST(RangeEnergy, ResidualEnergyFollowsTheRangeTable) {
  EXPECT_DOUBLE_EQ(residual_energy_mev(150.0, 0.0), 150.0);
  // After half the range, the energy whose range is the other half.
  const double r = csda_range_mm(150.0);
  EXPECT_NEAR(residual_energy_mev(150.0, 0.5 * r), energy_from_csda_range_mev(0.5 * r), 1e-9);
  // Residual energy after 77.18 mm (the CSDA range at 100 MeV) of a 150 MeV proton:
  // R(E) = 157.70 − 77.18 = 80.52 mm → about 104.5 MeV.
  EXPECT_NEAR(residual_energy_mev(150.0, 77.18), energy_from_csda_range_mev(157.70 - 77.18), 1e-6);
  EXPECT_GT(residual_energy_mev(150.0, 77.18), 100.0);
  // Monotone in depth and 0 at and beyond the range.
  double e_prev = 1e9;
  for (double w = 0.0; w < r; w += 0.37) {
    const double e = residual_energy_mev(150.0, w);
    EXPECT_LT(e, e_prev);
    e_prev = e;
  }
  EXPECT_EQ(residual_energy_mev(150.0, r), 0.0);
  EXPECT_EQ(residual_energy_mev(150.0, r + 50.0), 0.0);
  EXPECT_GT(residual_energy_mev(150.0, r - 1e-3), 0.0);
}

TEST(RangeEnergy, EnergyOutsideTheTableIsInputErrorNamingValueAndRange) {
  const std::string m = message_of<InputError>([] { residual_energy_mev(600.0, 10.0); });
  EXPECT_NE(m.find("600 MeV"), std::string::npos) << m;
  EXPECT_NE(m.find("0.001 to 500 MeV"), std::string::npos) << m;
  EXPECT_NE(message_of<InputError>([] { csda_range_mm(0.0); }).find("0 MeV"), std::string::npos);
  EXPECT_NE(message_of<InputError>([] { stopping_power_water_mev_cm2_g(-5.0); }).find("-5 MeV"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { energy_from_csda_range_mev(2000.0); }).find("200 g/cm2"),
            std::string::npos);
}

TEST(RangeEnergy, NegativeOrNonFiniteWeplIsInputError) {
  EXPECT_NE(message_of<InputError>([] { residual_energy_mev(100.0, -1.0); }).find("-1 mm"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { residual_energy_mev(100.0, std::nan("")); }).find("nan"),
            std::string::npos);
}

TEST(BraggKleeman, PowerLawAndItsInverse) {
  // R = 0.0022 · E^1.77 cm (Bortfeld 1997): 150 MeV → 15.9 cm, within 1 % of PSTAR's 15.77.
  EXPECT_NEAR(bragg_kleeman_range_mm(150.0), 10.0 * 0.0022 * std::pow(150.0, 1.77), 1e-12);
  EXPECT_NEAR(bragg_kleeman_range_mm(150.0) / csda_range_mm(150.0), 1.0, 0.01);
  EXPECT_NEAR(bragg_kleeman_energy_mev(bragg_kleeman_range_mm(123.0)), 123.0, 1e-9);
  EXPECT_EQ(bragg_kleeman_range_mm(0.0), 0.0);
  EXPECT_THROW(bragg_kleeman_range_mm(-1.0), InputError);
  EXPECT_THROW(bragg_kleeman_energy_mev(-1.0), InputError);
}

TEST(RangeEnergyTable, RejectsNonIncreasingEnergyNamingFileRowAndValue) {
  const std::string path = write_file("pstar_bad_order.csv",
                                      "# test\n"
                                      "energy_MeV,total_stopping_power_MeV_cm2_per_g,csda_range_g_per_cm2\n"
                                      "10,45.67,0.123\n"
                                      "20,26.07,0.426\n"
                                      "15,32.92,0.2539\n");
  const std::string m = message_of<DataError>([&] { RangeEnergyTable::load_csv(path); });
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("row 3"), std::string::npos) << m;
  EXPECT_NE(m.find("15 MeV"), std::string::npos) << m;
}

TEST(RangeEnergyTable, RejectsMalformedNumberNamingFileRowAndText) {
  const std::string path = write_file("pstar_bad_number.csv",
                                      "energy_MeV,total_stopping_power_MeV_cm2_per_g,csda_range_g_per_cm2\n"
                                      "10,45.67,0.123\n"
                                      "20,2x6.07,0.426\n");
  const std::string m = message_of<DataError>([&] { RangeEnergyTable::load_csv(path); });
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("row 2 (line 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("'2x6.07'"), std::string::npos) << m;
}

TEST(RangeEnergyTable, RejectsNonPositiveStoppingPowerAndMissingColumn) {
  const std::string bad = write_file("pstar_bad_stopping.csv",
                                     "energy_MeV,total_stopping_power_MeV_cm2_per_g,csda_range_g_per_cm2\n"
                                     "10,45.67,0.123\n"
                                     "20,0,0.426\n");
  const std::string m = message_of<DataError>([&] { RangeEnergyTable::load_csv(bad); });
  EXPECT_NE(m.find("row 2"), std::string::npos) << m;
  EXPECT_NE(m.find("stopping power 0"), std::string::npos) << m;
  const std::string missing = write_file("pstar_missing_column.csv", "energy_MeV,csda_range_g_per_cm2\n10,0.123\n");
  const std::string m2 = message_of<DataError>([&] { RangeEnergyTable::load_csv(missing); });
  EXPECT_NE(m2.find("total_stopping_power_MeV_cm2_per_g"), std::string::npos) << m2;
}

TEST(RangeEnergyTable, MissingFileIsIoError) {
  EXPECT_THROW(RangeEnergyTable::load_csv("/nonexistent/pstar.csv"), IoError);
}

TEST(RangeEnergy, ShippedDataDirHonoursTheEnvironmentVariable) {
  const char* before = std::getenv("PROTONDOSE_DATA_DIR");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("PROTONDOSE_DATA_DIR", "/somewhere/else", 1);
  EXPECT_EQ(shipped_data_dir().string(), "/somewhere/else");
  ::setenv("PROTONDOSE_DATA_DIR", "", 1);  // empty: the compiled-in data folder
  EXPECT_EQ(shipped_data_dir().string(), std::string(PROTONDOSE_DATA_DIR));
  if (before != nullptr)
    ::setenv("PROTONDOSE_DATA_DIR", saved.c_str(), 1);
  else
    ::unsetenv("PROTONDOSE_DATA_DIR");
}

}  // namespace
}  // namespace protondose::physics
