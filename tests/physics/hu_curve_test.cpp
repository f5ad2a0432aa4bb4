#include "expect_error.h"
#include "protondose/physics/hu_curve.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/physics/materials.h"

namespace protondose::physics {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/" + name;
  std::ofstream out(path);
  out << text;
  return path;
}

using protondose::testing::message_of;

HuCurve three_point_curve() {
  return HuCurve({{-1000.0, 0.001, 0.001}, {0.0, 1.0, 1.0}, {1000.0, 1.5, 1.6}}, "test curve");
}

TEST(HuCurve, InterpolatesLinearlyBetweenRows) {
  const HuCurve c = three_point_curve();
  EXPECT_DOUBLE_EQ(c.rsp(0.0), 1.0);
  EXPECT_NEAR(c.rsp(500.0), 1.25, 1e-12);
  EXPECT_NEAR(c.rsp(-500.0), 0.5005, 1e-12);
  EXPECT_NEAR(c.mass_density_g_cm3(250.0), 1.15, 1e-12);
  EXPECT_DOUBLE_EQ(c.rsp(1000.0), 1.5);
  EXPECT_DOUBLE_EQ(c.rsp(-1000.0), 0.001);
}

TEST(HuCurve, StepIsRightContinuous) {
  const HuCurve c({{-100.0, 0.9, 0.9}, {100.0, 1.0, 1.0}, {100.0, 1.4, 1.5}, {200.0, 1.5, 1.6}}, "step");
  EXPECT_NEAR(c.rsp(99.5), 0.99975, 1e-12);
  EXPECT_DOUBLE_EQ(c.rsp(100.0), 1.4);
  EXPECT_DOUBLE_EQ(c.rsp_at(100), 1.4f);
  EXPECT_NEAR(c.rsp_at(99), 0.9995f, 1e-6);
  EXPECT_NEAR(c.mass_density_g_cm3(150.0), 1.55, 1e-12);
}

TEST(HuCurve, DenseTableMatchesInterpolationAtEveryIntegerHu) {
  const HuCurve c = three_point_curve();
  ASSERT_EQ(c.table_hu_first(), -1000);
  ASSERT_EQ(c.table_hu_last(), 1000);
  for (int hu = -1000; hu <= 1000; ++hu) {
    ASSERT_NEAR(c.rsp_at(hu), c.rsp(hu), 1e-6) << hu;
    ASSERT_NEAR(c.mass_density_g_cm3_at(hu), c.mass_density_g_cm3(hu), 1e-6) << hu;
    ASSERT_NEAR(c.radiation_length_g_cm2_at(hu), c.radiation_length_g_cm2(hu), 1e-4) << hu;
  }
}

TEST(HuCurve, RadiationLengthFollowsDensity) {
  const HuCurve c = three_point_curve();
  EXPECT_NEAR(c.radiation_length_g_cm2(0.0), kWaterRadiationLengthGCm2, 0.02);
  EXPECT_LT(c.radiation_length_g_cm2(1000.0), 32.0);  // bone-like: heavier elements
  EXPECT_DOUBLE_EQ(c.radiation_length_g_cm2(1000.0), radiation_length_g_cm2(1.6));
}

TEST(HuCurve, PointLookupOutsideRangeIsInputErrorNamingHuAndRange) {
  const HuCurve c = three_point_curve();
  const std::string msg = message_of<InputError>([&] { (void)c.rsp(1200.0); });
  EXPECT_NE(msg.find("1200"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[-1000, 1000] HU"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test curve"), std::string::npos) << msg;
  EXPECT_THROW((void)c.mass_density_g_cm3(-1001.0), InputError);
  EXPECT_THROW((void)c.radiation_length_g_cm2(std::nan("")), InputError);
}

TEST(HuCurve, ConvertUnderErrorPolicyRejectsUncoveredHu) {
  const HuCurve c = three_point_curve();
  const std::vector<float> hu = {0.0f, 10.0f, 1500.0f, -1200.0f};
  std::vector<float> rsp(hu.size());
  const std::string msg = message_of<InputError>(
      [&] { c.convert(hu.data(), hu.size(), HuCoveragePolicy::kError, rsp.data(), nullptr); });
  EXPECT_NE(msg.find("HU 1500 at voxel 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 of 4 voxels outside"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[-1000, 1000] HU"), std::string::npos) << msg;
}

TEST(HuCurve, ConvertUnderClampPolicyCountsAndReports) {
  const HuCurve c = three_point_curve();
  const std::vector<std::int16_t> hu = {0, 500, 1500, 1700, -1200};
  std::vector<float> rsp(hu.size());
  std::vector<float> rho(hu.size());
  const HuConversionReport r =
      c.convert(hu.data(), hu.size(), HuCoveragePolicy::kClampToEnds, rsp.data(), rho.data());
  EXPECT_EQ(r.voxel_count, 5u);
  EXPECT_EQ(r.clamped_above_count, 2u);
  EXPECT_EQ(r.clamped_below_count, 1u);
  EXPECT_DOUBLE_EQ(r.ct_hu_min, -1200.0);
  EXPECT_DOUBLE_EQ(r.ct_hu_max, 1700.0);
  EXPECT_FLOAT_EQ(rsp[1], 1.25f);
  EXPECT_FLOAT_EQ(rsp[2], 1.5f);
  EXPECT_FLOAT_EQ(rsp[4], 0.001f);
  EXPECT_FLOAT_EQ(rho[3], 1.6f);
  EXPECT_NE(r.clamp_summary.find("1 voxels below -1000 HU and 2 voxels above 1000 HU"), std::string::npos)
      << r.clamp_summary;
}

TEST(HuCurve, ConvertWithEverythingCoveredHasEmptySummary) {
  const HuCurve c = three_point_curve();
  const std::vector<float> hu = {-999.6f, 0.4f, 999.5f};
  std::vector<float> rsp(hu.size());
  const HuConversionReport r = c.convert(hu.data(), hu.size(), HuCoveragePolicy::kError, rsp.data(), nullptr);
  EXPECT_TRUE(r.clamp_summary.empty());
  EXPECT_FLOAT_EQ(rsp[1], 1.0f);  // 0.4 rounds to 0 HU
  EXPECT_NEAR(rsp[0], c.rsp(-1000.0), 1e-6);
}

TEST(HuCurve, ConvertRejectsNonFiniteCtNumber) {
  const HuCurve c = three_point_curve();
  const std::vector<float> hu = {0.0f, std::nanf("")};
  const std::string msg = message_of<InputError>(
      [&] { c.convert(hu.data(), hu.size(), HuCoveragePolicy::kClampToEnds, nullptr, nullptr); });
  EXPECT_NE(msg.find("voxel 1"), std::string::npos) << msg;
}

TEST(HuCurve, RejectsFewerThanTwoRows) {
  const std::string msg = message_of<DataError>([] { HuCurve({{0.0, 1.0, 1.0}}, "one-row"); });
  EXPECT_NE(msg.find("one-row"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at least 2"), std::string::npos) << msg;
}

TEST(HuCurve, RejectsDecreasingHu) {
  const std::string msg = message_of<DataError>(
      [] { HuCurve({{0.0, 1.0, 1.0}, {100.0, 1.1, 1.1}, {50.0, 1.2, 1.2}}, "dec"); });
  EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HU 50"), std::string::npos) << msg;
}

TEST(HuCurve, RejectsNonPositiveRspAndDensity) {
  std::string msg = message_of<DataError>([] { HuCurve({{0.0, 0.0, 1.0}, {100.0, 1.1, 1.1}}, "z"); });
  EXPECT_NE(msg.find("rsp 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
  msg = message_of<DataError>([] { HuCurve({{0.0, 1.0, 1.0}, {100.0, 1.1, -1.1}}, "z"); });
  EXPECT_NE(msg.find("mass density -1.1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
}

TEST(HuCurve, RejectsThreeRowsAtOneHuAndNonFinite) {
  std::string msg = message_of<DataError>(
      [] { HuCurve({{0.0, 1.0, 1.0}, {0.0, 1.1, 1.1}, {0.0, 1.2, 1.2}, {5.0, 1.3, 1.3}}, "t"); });
  EXPECT_NE(msg.find("three rows"), std::string::npos) << msg;
  msg = message_of<DataError>(
      [] { HuCurve({{0.0, 1.0, 1.0}, {std::nan(""), 1.1, 1.1}}, "t"); });
  EXPECT_NE(msg.find("non-finite"), std::string::npos) << msg;
  msg = message_of<DataError>([] { HuCurve({{5.0, 1.0, 1.0}, {5.0, 1.1, 1.1}}, "t"); });
  EXPECT_NE(msg.find("span"), std::string::npos) << msg;
}

TEST(HuCurveCsv, LoadsColumnsCaseInsensitiveInAnyOrderWithComments) {
  const std::string path = write_file("hu_any_order.csv",
                                      "# a comment\n"
                                      "\n"
                                      "Mass_Density_G_CM3, note ,RSP,hu\r\n"
                                      "# another comment\n"
                                      "0.0012,air,0.001,-1000\n"
                                      "1.0,water,1.0,0\n"
                                      "1.6,bone,1.5,1000\n");
  const HuCurve c = load_hu_curve_csv(path);
  ASSERT_EQ(c.points().size(), 3u);
  EXPECT_DOUBLE_EQ(c.hu_min(), -1000.0);
  EXPECT_NEAR(c.rsp(500.0), 1.25, 1e-12);
  EXPECT_NEAR(c.mass_density_g_cm3(500.0), 1.3, 1e-12);
  EXPECT_EQ(c.source(), path);
}

TEST(HuCurveCsv, MissingColumnIsDataErrorNamingFileAndColumn) {
  const std::string path = write_file("hu_missing_col.csv", "HU,rsp\n0,1\n100,1.1\n");
  const std::string msg = message_of<DataError>([&] { (void)load_hu_curve_csv(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("mass_density_g_cm3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 1"), std::string::npos) << msg;
}

TEST(HuCurveCsv, MalformedNumberIsDataErrorNamingLineAndValue) {
  const std::string path = write_file("hu_bad_number.csv", "# c\nHU,rsp,mass_density_g_cm3\n0,1,1\n100,1.1x,1.1\n");
  const std::string msg = message_of<DataError>([&] { (void)load_hu_curve_csv(path); });
  EXPECT_NE(msg.find("line 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'1.1x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'rsp'"), std::string::npos) << msg;
}

TEST(HuCurveCsv, ValidationErrorNamesFileLine) {
  const std::string path = write_file("hu_decreasing.csv", "HU,rsp,mass_density_g_cm3\n0,1,1\n\n-10,1.1,1.1\n");
  const std::string msg = message_of<DataError>([&] { (void)load_hu_curve_csv(path); });
  EXPECT_NE(msg.find(path + ", line 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HU -10"), std::string::npos) << msg;
}

TEST(HuCurveCsv, ShortRowAndDuplicateColumnAndEmptyFile) {
  std::string path = write_file("hu_short.csv", "HU,rsp,mass_density_g_cm3\n0,1\n");
  std::string msg = message_of<DataError>([&] { (void)load_hu_curve_csv(path); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  path = write_file("hu_dup.csv", "HU,rsp,RSP,mass_density_g_cm3\n");
  msg = message_of<DataError>([&] { (void)load_hu_curve_csv(path); });
  EXPECT_NE(msg.find("appears twice"), std::string::npos) << msg;
  path = write_file("hu_empty.csv", "# only a comment\n");
  msg = message_of<DataError>([&] { (void)load_hu_curve_csv(path); });
  EXPECT_NE(msg.find("no header"), std::string::npos) << msg;
}

TEST(HuCurveCsv, MissingFileIsIoError) {
  const std::string msg =
      message_of<IoError>([] { (void)load_hu_curve_csv("/nonexistent/dir/curve.csv"); });
  EXPECT_NE(msg.find("/nonexistent/dir/curve.csv"), std::string::npos) << msg;
}

TEST(HuCurveCsv, ReferenceCalibrationsLoad) {
  for (const char* c : {"water_dcpt", "slab_dcpt"}) {
    const HuCurve curve =
        load_hu_curve_csv(std::string(PROTONDOSE_SHARED_DIR) + "/reference/" + c + "/hu_calibration.csv");
    EXPECT_DOUBLE_EQ(curve.hu_min(), -1024.0) << c;
    EXPECT_DOUBLE_EQ(curve.hu_max(), 3000.0) << c;
    EXPECT_NEAR(curve.rsp(-720.0), 0.2994, 1e-12) << c;
    EXPECT_NEAR(curve.rsp(1300.0), 1.5064, 1e-12) << c;
    EXPECT_NEAR(curve.mass_density_g_cm3(1300.0), 1.70, 1e-12) << c;
    EXPECT_DOUBLE_EQ(curve.rsp(0.0), 1.0) << c;
  }
}

TEST(HuCurveCsv, DefaultIsTheStoichiometricCurveAndTheMonteCarloCurveIsShippedByName) {
  EXPECT_STREQ(kDefaultHuCurveFile, "schneider2000_stoichiometric.csv");
  EXPECT_NE(default_hu_curve().source().find("schneider2000_stoichiometric.csv"), std::string::npos);
  const HuCurve mc = monte_carlo_reference_hu_curve();
  EXPECT_NE(mc.source().find("dcpt_mcsquare_4tissue.csv"), std::string::npos);
  // The shipped copy is the reference's own calibration (shared/reference/*/hu_calibration.csv).
  const HuCurve reference =
      load_hu_curve_csv(std::string(PROTONDOSE_SHARED_DIR) + "/reference/water_dcpt/hu_calibration.csv");
  ASSERT_EQ(mc.points().size(), reference.points().size());
  for (std::size_t i = 0; i < mc.points().size(); ++i) {
    EXPECT_DOUBLE_EQ(mc.points()[i].hu, reference.points()[i].hu) << i;
    EXPECT_DOUBLE_EQ(mc.points()[i].rsp, reference.points()[i].rsp) << i;
    EXPECT_DOUBLE_EQ(mc.points()[i].mass_density_g_cm3, reference.points()[i].mass_density_g_cm3) << i;
  }
}

// The stoichiometric curve's stopping-power physics against an independent
// source: MCsquare's own mass stopping-power ratios to water at 100 MeV for ICRP
// lung and cortical bone (shared/reference/water_dcpt/hu_calibration.csv). The
// curve's "lung" and densest bone group ("marrow/bone 15") have the ICRP lung
// and cortical-bone compositions (Schneider et al. 2000), so RSP/ρ at those
// tissue points must match MCsquare's ratios to the accuracy of the Bethe
// formula with ICRU 37 I-values (stated: 1 %).
TEST(HuCurveCsv, StoichiometricMassStoppingPowerRatiosMatchMonteCarloMaterials) {
  std::map<std::string, double> mc_ratio;
  {
    std::ifstream in(std::string(PROTONDOSE_SHARED_DIR) + "/reference/water_dcpt/hu_calibration.csv");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      std::string x;
      while (std::getline(ss, x, ',')) f.push_back(x);
      mc_ratio[f[2]] = std::stod(f[4]);
    }
  }
  ASSERT_TRUE(mc_ratio.count("Lung (ICRP)") && mc_ratio.count("Bone_Cortical (ICRP)"));
  std::map<std::string, double> curve_ratio;
  {
    std::ifstream in(std::string(PROTONDOSE_DATA_DIR) + "/hu-curves/" + kDefaultHuCurveFile);
    std::string line;
    while (std::getline(in, line) && line.rfind("HU,", 0) != 0) {
    }
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      std::string x;
      while (std::getline(ss, x, ',')) f.push_back(x);
      if (f[3] == "lung" || f[3] == "marrow/bone 15") curve_ratio[f[3]] = std::stod(f[1]) / std::stod(f[2]);
    }
  }
  ASSERT_EQ(curve_ratio.size(), 2u);
  EXPECT_NEAR(curve_ratio["lung"], mc_ratio["Lung (ICRP)"], 0.01);
  EXPECT_NEAR(curve_ratio["marrow/bone 15"], mc_ratio["Bone_Cortical (ICRP)"], 0.01);
}

TEST(HuCurveCsv, DefaultCurveLoadsAndCoversCtRange) {
  const HuCurve c = default_hu_curve();
  EXPECT_LE(c.hu_min(), -1024.0);
  EXPECT_GE(c.hu_max(), 3000.0);
  EXPECT_DOUBLE_EQ(c.rsp(0.0), 1.0);
  EXPECT_DOUBLE_EQ(c.mass_density_g_cm3(0.0), 1.0);
  for (int hu = c.table_hu_first() + 1; hu <= c.table_hu_last(); ++hu) {
    ASSERT_GE(c.rsp_at(hu), c.rsp_at(hu - 1)) << "rsp must not decrease at " << hu << " HU";
  }
}

}  // namespace
}  // namespace protondose::physics
