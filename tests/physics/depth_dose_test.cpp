#include "expect_error.h"
#include "protondose/physics/depth_dose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
  return path;
}

using protondose::testing::message_of;

/// A synthetic "Bragg-like" curve: IDD 10 from 0 to 40 mm rising linearly to 50
/// at 50 mm, falling linearly to 0 at 60 mm (1 mm nodes).
CumulativeDepthDose triangle_curve(double step_mm = 1.0) {
  std::vector<double> d, v;
  for (double x = 0.0; x <= 60.0 + 1e-9; x += step_mm) {
    d.push_back(x);
    v.push_back(x <= 40.0 ? 10.0 : x <= 50.0 ? 10.0 + 4.0 * (x - 40.0) : 50.0 - 5.0 * (x - 50.0));
  }
  v.back() = 0.0;
  return CumulativeDepthDose::from_idd_samples(d, v, 100.0, "triangle");
}

TEST(CumulativeDepthDose, IntegratesThePiecewiseLinearIddExactly) {
  const CumulativeDepthDose c = triangle_curve();
  // 0.1 g/cm² per mm: 40 mm × 10 + (10+50)/2 × 10 + 50/2 × 10 = 400 + 300 + 250 = 950 → 95 MeV.
  EXPECT_NEAR(c.total_energy_mev(), 95.0, 1e-12);
  EXPECT_NEAR(c.cidd_mev(20.0), 20.0, 1e-12);
  EXPECT_NEAR(c.cidd_mev(45.0), 40.0 + 0.1 * (10.0 * 5.0 + 0.5 * 4.0 * 25.0), 1e-12);
  EXPECT_EQ(c.cidd_mev(-3.0), 0.0);
  EXPECT_EQ(c.cidd_mev(0.0), 0.0);
  EXPECT_EQ(c.cidd_mev(60.0), c.total_energy_mev());
  EXPECT_EQ(c.cidd_mev(1e6), c.total_energy_mev());
  EXPECT_NEAR(c.idd_mev_cm2_g(45.5), 32.0, 1e-12);
  EXPECT_EQ(c.idd_mev_cm2_g(61.0), 0.0);
  double prev = -1.0;
  for (double w = -1.0; w < 70.0; w += 0.013) {
    const double x = c.cidd_mev(w);
    EXPECT_GE(x, prev) << w;
    prev = x;
  }
}

TEST(CumulativeDepthDose, UniformAndIrregularNodesGiveTheSameCurve) {
  const CumulativeDepthDose uniform = triangle_curve();
  std::vector<double> d, v;
  for (double x : {0.0, 3.0, 17.5, 40.0, 41.0, 44.0, 50.0, 53.3, 60.0}) {
    d.push_back(x);
    v.push_back(uniform.idd_mev_cm2_g(x));
  }
  const CumulativeDepthDose irregular = CumulativeDepthDose::from_idd_samples(d, v, 100.0, "irregular");
  for (double w = 0.0; w <= 61.0; w += 0.25)
    EXPECT_NEAR(irregular.cidd_mev(w), uniform.cidd_mev(w), 1e-9) << w;
}

TEST(CumulativeDepthDose, BinCentreSamplesGetASurfaceNodeByLinearExtrapolation) {
  // Bin averages at 0.5, 1.5, …: the IDD is linear over the first bins, so the
  // average over [0, 1 mm] equals the first sample and entrance IDD = first sample.
  const CumulativeDepthDose c = CumulativeDepthDose::from_idd_samples(
      {0.5, 1.5, 2.5, 3.5, 4.5}, {10.0, 11.0, 30.0, 5.0, 0.0}, 70.0, "bins");
  EXPECT_EQ(c.depth_mm().front(), 0.0);
  EXPECT_NEAR(c.idd_nodes_mev_cm2_g().front(), 9.5, 1e-12);
  EXPECT_NEAR(c.cidd_mev(1.0) / 0.1, 10.0, 1e-12);
  EXPECT_NEAR(c.entrance_idd_mev_cm2_g(), 10.0, 1e-12);
}

TEST(CumulativeDepthDose, RangesAndPeakFollowTheDocumentedDefinitions) {
  const CumulativeDepthDose c = triangle_curve(0.5);
  // Fall-off 50 → 0 over 50–60 mm: level f·50 at 60 − 10 f.
  EXPECT_NEAR(c.r80_mm(), 52.0, 1e-9);
  EXPECT_NEAR(c.r90_mm(), 51.0, 1e-9);
  EXPECT_NEAR(c.r20_mm(), 58.0, 1e-9);
  EXPECT_NEAR(c.range_mm(), c.r80_mm(), 0.0);
  EXPECT_NEAR(c.distal_depth_mm(0.5), 55.0, 1e-9);
  // The peak is the vertex of the parabola through the nodes >= 97 % (49.5, 50, 50.5 mm).
  EXPECT_NEAR(c.peak_to_entrance(), c.peak_idd_mev_cm2_g() / 10.0, 1e-12);
  EXPECT_NEAR(c.peak_to_entrance(), 5.0, 1e-3);
  EXPECT_NEAR(c.max_node_idd_mev_cm2_g(), 50.0, 0.0);
  EXPECT_THROW(c.distal_depth_mm(1.0), InputError);
  // A parabolic peak sampled off its vertex: the fit recovers vertex and height.
  std::vector<double> d, v;
  for (double x = 0.0; x <= 20.0; x += 1.0) {
    d.push_back(x);
    v.push_back(std::max(0.0, 100.0 - 2.0 * (x - 10.3) * (x - 10.3)));
  }
  v.back() = 0.0;
  const CumulativeDepthDose p = CumulativeDepthDose::from_idd_samples(d, v, 100.0, "parabola");
  EXPECT_NEAR(p.peak_depth_mm(), 10.3, 1e-9);
  EXPECT_NEAR(p.peak_idd_mev_cm2_g(), 100.0, 1e-9);
}

TEST(CumulativeDepthDose, RebinningConservesEnergyAndAveragesEachBin) {
  const CumulativeDepthDose fine = triangle_curve(0.1);
  const CumulativeDepthDose binned = fine.rebinned(1.0);
  EXPECT_NEAR(binned.idd_mev_cm2_g(45.5), (fine.cidd_mev(46.0) - fine.cidd_mev(45.0)) / 0.1, 1e-9);
  EXPECT_NEAR(binned.total_energy_mev(), fine.total_energy_mev(), 1e-3 * fine.total_energy_mev());
  EXPECT_THROW(fine.rebinned(0.0), InputError);
}

TEST(CumulativeDepthDose, RejectsBadSamplesNamingSourceSampleAndValue) {
  std::string m = message_of<DataError>(
      [] { CumulativeDepthDose::from_idd_samples({0, 2, 1}, {1, 1, 0}, 90.0, "mycurve"); });
  EXPECT_NE(m.find("mycurve (90 MeV): sample 3: depth 1 mm"), std::string::npos) << m;
  m = message_of<DataError>(
      [] { CumulativeDepthDose::from_idd_samples({0, 1, 2}, {1, -4, 0}, 90.0, "mycurve"); });
  EXPECT_NE(m.find("sample 2: IDD -4"), std::string::npos) << m;
  m = message_of<DataError>([] { CumulativeDepthDose::from_idd_samples({0, 1}, {0, 0}, 90.0, "z"); });
  EXPECT_NE(m.find("every IDD value is 0"), std::string::npos) << m;
  m = message_of<DataError>(
      [] { CumulativeDepthDose::from_idd_samples({0, 1, 2}, {1, 5, 4}, 90.0, "cut"); });
  EXPECT_NE(m.find("truncated before the distal fall-off"), std::string::npos) << m;
  m = message_of<DataError>([] { CumulativeDepthDose::from_idd_samples({0}, {1}, 90.0, "one"); });
  EXPECT_NE(m.find("at least 2 samples"), std::string::npos) << m;
}

TEST(IddCsv, ReadsTheDcptMonteCarloFormat) {
  const std::string path = write_file("idd_ok.csv",
                                      "depth_mm,idd_Gy_mm2_per_MU,idd_MeV_cm2_per_g_per_proton,rel_std_err\n"
                                      "0.5,0.1,10.0,1e-3\n1.5,0.2,20.0,1e-3\n2.5,0.1,5.0,1e-3\n3.5,0,0,0\n");
  const CumulativeDepthDose c = load_idd_csv(path, 80.0);
  EXPECT_EQ(c.nominal_energy_mev(), 80.0);
  EXPECT_NEAR(c.idd_mev_cm2_g(1.5), 20.0, 1e-12);
  EXPECT_NEAR(c.total_energy_mev(), 0.1 * (10.0 + 20.0 + 5.0), 0.2);
}

TEST(IddCsv, RejectsNonMonotoneDepthNamingFileRowAndValue) {
  const std::string path = write_file("idd_bad_depth.csv",
                                      "depth_mm,idd_MeV_cm2_per_g_per_proton\n"
                                      "0.5,10\n1.5,20\n1.5,30\n2.5,0\n");
  const std::string m = message_of<DataError>([&] { load_idd_csv(path, 80.0); });
  EXPECT_NE(m.find(path + ": row 3 (line 4), column depth_mm: depth 1.5 mm"), std::string::npos) << m;
}

TEST(IddCsv, RejectsNegativeIddNamingFileRowAndValue) {
  const std::string path = write_file("idd_negative.csv",
                                      "depth_mm,idd_MeV_cm2_per_g_per_proton\n"
                                      "# comment lines are skipped\n"
                                      "0.5,10\n1.5,-2.5\n2.5,0\n");
  const std::string m = message_of<DataError>([&] { load_idd_csv(path, 80.0); });
  EXPECT_NE(m.find("row 2 (line 4), column idd_MeV_cm2_per_g_per_proton: IDD -2.5"),
            std::string::npos)
      << m;
}

TEST(IddCsv, RejectsMissingColumnAndShortRows) {
  const std::string a = write_file("idd_no_column.csv", "depth_mm,dose\n0.5,1\n");
  EXPECT_NE(message_of<DataError>([&] { load_idd_csv(a, 80.0); })
                .find("missing column 'idd_MeV_cm2_per_g_per_proton'"),
            std::string::npos);
  const std::string b = write_file("idd_short_row.csv", "depth_mm,idd_MeV_cm2_per_g_per_proton\n0.5\n");
  EXPECT_NE(message_of<DataError>([&] { load_idd_csv(b, 80.0); }).find("row 1 (line 2) has 1 cells"),
            std::string::npos);
  EXPECT_THROW(load_idd_csv("/nonexistent/idd.csv", 80.0), IoError);
}

// ---------------------------------------------------------------------------
// Bortfeld 1997

/// Brute-force J(a, ζ) = (2π)^−½ ∫₀^∞ t^a e^{−(t−ζ)²/2} dt with t = u², midpoint rule.
double brute_force_j(double a, double zeta) {
  const int n = 400000;
  const double u_max = std::sqrt(std::max(zeta, 0.0) + 12.0);
  const double h = u_max / n;
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u = (i + 0.5) * h;
    const double t = u * u;
    s += std::pow(t, a) * std::exp(-0.5 * (t - zeta) * (t - zeta)) * 2.0 * u;
  }
  return s * h / std::sqrt(2.0 * 3.14159265358979323846);
}

TEST(Bortfeld, ParabolicCylinderTermsMatchDirectQuadratureOnBothSidesOfEachSeriesSwitch) {
  const BortfeldParameters p;  // β = 0.012 /cm, γ = 0.6
  const double r0_mm = 100.0, sigma_mm = 1.0;
  for (double zeta : {-6.0, -4.01, -3.99, -1.0, 0.0, 0.7, 3.0, 9.99, 10.01, 25.0}) {
    const double z = r0_mm - zeta * sigma_mm;
    const double pw = 1.0 / kBraggKleemanP;
    const double pre = std::pow(0.1 * sigma_mm, pw) /
                       (kBraggKleemanP * std::pow(kBraggKleemanAlphaCm, pw) * (1.0 + p.beta_per_cm * 0.1 * r0_mm));
    const double expected = pre * (brute_force_j(pw - 1.0, zeta) / (0.1 * sigma_mm) +
                                   (p.beta_per_cm + p.gamma * p.beta_per_cm * kBraggKleemanP) *
                                       brute_force_j(pw, zeta));
    const double got = bortfeld_idd_mev_cm2_g(z, r0_mm, sigma_mm, p);
    EXPECT_NEAR(got, expected, 2e-4 * expected + 1e-12) << "zeta " << zeta;
  }
}

TEST(Bortfeld, FarFromThePeakTheCurveIsTheUnstraggledEquation28) {
  const BortfeldParameters p;
  const double r0_mm = 200.0, sigma_mm = 2.0;
  const double r0_cm = 20.0, pw = 1.0 / kBraggKleemanP;
  // ζ = (R0 − z)/σ ≥ 50: the Gaussian convolution differs from Eq. 28 by ~a(a−1)/(2ζ²) ≈ 1e−4.
  for (double z_mm : {0.0, 50.0, 100.0}) {
    const double d_cm = r0_cm - 0.1 * z_mm;
    const double eq28 = (std::pow(d_cm, pw - 1.0) +
                         (p.beta_per_cm + p.gamma * p.beta_per_cm * kBraggKleemanP) * std::pow(d_cm, pw)) /
                        (kBraggKleemanP * std::pow(kBraggKleemanAlphaCm, pw) * (1.0 + p.beta_per_cm * r0_cm));
    EXPECT_NEAR(bortfeld_idd_mev_cm2_g(z_mm, r0_mm, sigma_mm, p), eq28, 2e-4 * eq28) << z_mm;
  }
}

TEST(Bortfeld, TotalEnergyMatchesTheIntegralOfTheModel) {
  // ∫ D dz = E_BK(R0) · [1 + (β + γβp) R0/(1 + p)] / (1 + βR0), E_BK = (R0/α)^{1/p}.
  BortfeldParameters p;
  p.depth_step_mm = 0.05;
  for (double e : {70.0, 150.0, 230.0}) {
    const CumulativeDepthDose c = bortfeld_depth_dose(e, e, 0.5, p);
    const double r0_cm = 0.1 * csda_range_mm(e);
    const double e_bk = std::pow(r0_cm / kBraggKleemanAlphaCm, 1.0 / kBraggKleemanP);
    const double expected =
        e_bk * (1.0 + (p.beta_per_cm + p.gamma * p.beta_per_cm * kBraggKleemanP) * r0_cm / (1.0 + kBraggKleemanP)) /
        (1.0 + p.beta_per_cm * r0_cm);
    EXPECT_NEAR(c.total_energy_mev(), expected, 1e-3 * expected) << e;
  }
}

TEST(Bortfeld, R80IsCloseToTheCsdaRangeAndStragglingFollowsEquation18) {
  // Bortfeld 1997: the distal 80 % point is a good estimate of R0 (to ~1–2 %).
  const BortfeldParameters p;
  for (double e : {70.0, 100.0, 150.0, 200.0, 230.0}) {
    const CumulativeDepthDose c = bortfeld_depth_dose(e, e, 0.0, p);
    EXPECT_NEAR(c.r80_mm() / csda_range_mm(e), 1.0, 0.01) << e;
    EXPECT_GT(c.peak_to_entrance(), 2.5) << e;
    EXPECT_LT(c.peak_depth_mm(), c.r80_mm()) << e;
  }
  EXPECT_NEAR(bortfeld_straggling_mm(157.7), 10.0 * 0.012 * std::pow(15.77, 0.935), 1e-12);
  EXPECT_NEAR(bortfeld_straggling_mm(157.7), 1.58, 0.01);
}

TEST(Bortfeld, EnergySpreadWidensTheFallOffAndLowersThePeak) {
  const BortfeldParameters p;
  const CumulativeDepthDose narrow = bortfeld_depth_dose(150.0, 150.0, 0.0, p);
  const CumulativeDepthDose wide = bortfeld_depth_dose(150.0, 150.0, 1.5, p);
  EXPECT_GT(wide.r20_mm() - wide.r80_mm(), narrow.r20_mm() - narrow.r80_mm());
  EXPECT_LT(wide.peak_idd_mev_cm2_g(), narrow.peak_idd_mev_cm2_g());
  EXPECT_NEAR(wide.total_energy_mev(), narrow.total_energy_mev(), 1e-3 * narrow.total_energy_mev());
}

TEST(Bortfeld, UpstreamWetAndRangeScaleShiftTheRange) {
  BortfeldParameters p;
  const double base = bortfeld_depth_dose(150.0, 150.0, 0.8, p).r80_mm();
  p.upstream_wet_mm = 0.64;
  EXPECT_NEAR(bortfeld_depth_dose(150.0, 150.0, 0.8, p).r80_mm(), base - 0.64, 0.02);
  p.upstream_wet_mm = 0.0;
  p.csda_range_scale = 1.003;
  EXPECT_NEAR(bortfeld_depth_dose(150.0, 150.0, 0.8, p).r80_mm(), base * 1.003, 0.02);
}

TEST(Bortfeld, InvalidParametersAreInputErrors) {
  BortfeldParameters p;
  p.gamma = 1.5;
  EXPECT_NE(message_of<InputError>([&] { bortfeld_depth_dose(150.0, 150.0, 0.8, p); }).find("gamma 1.5"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { bortfeld_depth_dose(150.0, 150.0, -0.1, BortfeldParameters{}); })
                .find("energy spread -0.1 MeV"),
            std::string::npos);
  EXPECT_NE(message_of<InputError>([] { bortfeld_depth_dose(600.0, 600.0, 0.1, BortfeldParameters{}); })
                .find("600 MeV"),
            std::string::npos);
  EXPECT_THROW(bortfeld_idd_mev_cm2_g(10.0, 100.0, 0.0, BortfeldParameters{}), InputError);
}

// ---------------------------------------------------------------------------
// DepthDoseLibrary

DepthDoseLibrary two_bortfeld_curves() {
  BortfeldParameters p;
  return DepthDoseLibrary::tabulated(
      {bortfeld_depth_dose(160.0, 160.0, 1.0, p), bortfeld_depth_dose(140.0, 140.0, 1.0, p)}, "two");
}

TEST(DepthDoseLibrary, ReturnsTheTabulatedCurveUnchangedAtItsEnergy) {
  const DepthDoseLibrary lib = two_bortfeld_curves();
  EXPECT_EQ(lib.min_energy_mev(), 140.0);
  EXPECT_EQ(lib.max_energy_mev(), 160.0);
  const CumulativeDepthDose c = lib.curve(140.0);
  EXPECT_EQ(c.depth_mm(), lib.tabulated_curves().front().depth_mm());
  EXPECT_EQ(c.idd_nodes_mev_cm2_g(), lib.tabulated_curves().front().idd_nodes_mev_cm2_g());
}

TEST(DepthDoseLibrary, InterpolatesOnReducedDepthNotNearestNeighbour) {
  const DepthDoseLibrary lib = two_bortfeld_curves();
  const BortfeldParameters p;
  const CumulativeDepthDose mid = lib.curve(150.0);
  const CumulativeDepthDose direct = bortfeld_depth_dose(150.0, 150.0, 1.0, p);
  // The interpolated curve's range follows PSTAR; its shape is the direct model's.
  EXPECT_NEAR(mid.r80_mm(), direct.r80_mm(), 0.1);
  EXPECT_NEAR(mid.peak_to_entrance(), direct.peak_to_entrance(), 0.02 * direct.peak_to_entrance());
  EXPECT_NEAR(mid.total_energy_mev(),
              0.5 * (lib.curve(140.0).total_energy_mev() + lib.curve(160.0).total_energy_mev()), 1e-9);
  for (double w = 0.0; w < 180.0; w += 5.0)
    EXPECT_NEAR(mid.cidd_mev(w), direct.cidd_mev(w), 0.01 * direct.total_energy_mev()) << w;
  // R80 increases smoothly and continuously towards the tabulated ends.
  double prev = 0.0;
  for (double e = 140.0; e <= 160.0; e += 0.5) {
    const double r = lib.curve(e).r80_mm();
    EXPECT_GT(r, prev) << e;
    prev = r;
  }
  EXPECT_NEAR(lib.curve(140.001).r80_mm(), lib.curve(140.0).r80_mm(), 0.01);
  EXPECT_NEAR(lib.curve(159.999).r80_mm(), lib.curve(160.0).r80_mm(), 0.01);
}

TEST(DepthDoseLibrary, EnergyOutsideTheLibraryIsInputErrorNamingEnergyAndRange) {
  const DepthDoseLibrary lib = two_bortfeld_curves();
  const std::string m = message_of<InputError>([&] { lib.curve(139.9); });
  EXPECT_NE(m.find("139.9 MeV"), std::string::npos) << m;
  EXPECT_NE(m.find("140 to 160 MeV"), std::string::npos) << m;
  EXPECT_THROW(lib.curve(std::nan("")), InputError);
  EXPECT_THROW(DepthDoseLibrary().curve(150.0), InputError);
}

TEST(DepthDoseLibrary, RejectsDuplicateEnergies) {
  const BortfeldParameters p;
  const std::string m = message_of<DataError>([&] {
    DepthDoseLibrary::tabulated({bortfeld_depth_dose(150.0, 150.0, 1.0, p), bortfeld_depth_dose(150.0, 151.0, 1.0, p)},
                                "dup");
  });
  EXPECT_NE(m.find("two depth-dose curves for 150 MeV"), std::string::npos) << m;
}

TEST(DepthDoseLibrary, AnalyticalLibraryInterpolatesMeanEnergyAndSpread) {
  const BortfeldParameters p;
  const DepthDoseLibrary lib =
      DepthDoseLibrary::analytical({{100.0, 101.0, 1.0}, {120.0, 121.0, 2.0}}, p, "spectra");
  EXPECT_EQ(lib.kind(), DepthDoseLibrary::Kind::kAnalyticalBortfeld);
  const CumulativeDepthDose c = lib.curve(110.0);
  const CumulativeDepthDose direct = bortfeld_depth_dose(110.0, 111.0, 1.5, p);
  EXPECT_NEAR(c.r80_mm(), direct.r80_mm(), 1e-12);
  EXPECT_NE(lib.description().find("analytical Bortfeld 1997"), std::string::npos);
  EXPECT_THROW(DepthDoseLibrary::analytical({{100.0, -1.0, 1.0}}, p, "bad"), DataError);
}

TEST(DepthDoseLibrary, IddFolderIndexMustListIncreasingEnergies) {
  const std::string dir = std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/idd_folder_bad";
  write_file("idd_folder_bad/a.csv", "depth_mm,idd_MeV_cm2_per_g_per_proton\n0.5,1\n1.5,2\n2.5,0\n");
  write_file("idd_folder_bad/index.csv", "nominal_energy_MeV,file\n100,a.csv\n90,a.csv\n");
  const std::string m = message_of<DataError>([&] { DepthDoseLibrary::load_idd_folder(dir); });
  EXPECT_NE(m.find("index.csv: row 2 (line 3), column nominal_energy_MeV: nominal energy 90"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace protondose::physics
