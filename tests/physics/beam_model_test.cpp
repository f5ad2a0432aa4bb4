#include "expect_error.h"
#include "protondose/physics/beam_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "protondose/core/error.h"

namespace protondose::physics {
namespace {

namespace fs = std::filesystem;

const std::string kOut = PROTONDOSE_TEST_OUTPUT_DIR;
const fs::path kShared = PROTONDOSE_SHARED_DIR;

std::string write_file(const std::string& relative, const std::string& text) {
  const fs::path path = fs::path(kOut) / relative;
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  return path.string();
}

using protondose::testing::message_of;

#define SKIP_WITHOUT_SHARED(path)                                                   \
  if (!fs::exists(path)) GTEST_SKIP() << "shared reference data not found: " << (path)

// ---------------------------------------------------------------------------
// The shipped DCPT_ProBeam_v5 machine

TEST(BeamModel, LoadsTheShippedDcptMachineByName) {
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  EXPECT_EQ(m.name(), "DCPT_ProBeam_v5");
  EXPECT_EQ(m.vsad_x_mm(), 2000.0);
  EXPECT_EQ(m.vsad_y_mm(), 2560.0);
  EXPECT_EQ(m.vsad_mm(Axis::kY), 2560.0);
  EXPECT_EQ(m.reference_plane_upstream_of_isocentre_mm(), 600.0);
  // Optics 70–244 MeV, MC depth doses 70–230 MeV: the overlap is accepted.
  EXPECT_EQ(m.min_energy_mev(), 70.0);
  EXPECT_EQ(m.max_energy_mev(), 230.0);
  EXPECT_EQ(m.energy_table().size(), 175u);
  EXPECT_EQ(m.depth_dose_library().kind(), DepthDoseLibrary::Kind::kTabulated);
  EXPECT_EQ(m.depth_dose_library().energies_mev().size(), 17u);
  // DCPT_beam_model__v5.csv row "70,70.13844937,0.8245064601,2029456,…".
  EXPECT_DOUBLE_EQ(m.mean_energy_mev(70.0), 70.13844937);
  EXPECT_DOUBLE_EQ(m.energy_spread_mev(70.0), 0.8245064601);
  EXPECT_DOUBLE_EQ(m.protons_per_mu(70.0), 2029456.0);
  EXPECT_DOUBLE_EQ(m.protons_per_mu(150.0), 3542880.0);
}

TEST(BeamModel, InterpolatesEveryParameterLinearlyInNominalEnergy) {
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  const BeamModelEnergy a = m.energy_row(150.0), b = m.energy_row(151.0), h = m.energy_row(150.25);
  const auto lerp = [](double x, double y) { return x + 0.25 * (y - x); };
  EXPECT_NEAR(h.mean_energy_mev, lerp(a.mean_energy_mev, b.mean_energy_mev), 1e-12);
  EXPECT_NEAR(h.energy_spread_mev, lerp(a.energy_spread_mev, b.energy_spread_mev), 1e-12);
  EXPECT_NEAR(h.protons_per_mu, lerp(a.protons_per_mu, b.protons_per_mu), 1e-6);
  EXPECT_NEAR(h.x.sigma_mm, lerp(a.x.sigma_mm, b.x.sigma_mm), 1e-12);
  EXPECT_NEAR(h.y.sigma_theta_rad, lerp(a.y.sigma_theta_rad, b.y.sigma_theta_rad), 1e-15);
  EXPECT_NEAR(h.x.correlation, lerp(a.x.correlation, b.x.correlation), 1e-12);
  EXPECT_NE(a.mean_energy_mev, b.mean_energy_mev);  // guard: the rows differ
}

TEST(BeamModel, InAirSpotSizeAtTheIsocentreMatchesTheReferenceTable) {
  // shared/reference/spot_model_DCPT_ProBeam_v5.csv: σx, σy at the isocentre (emittance propagation).
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  const struct {
    double e, sx, sy;
  } ref[] = {{70, 5.9707, 6.0770}, {100, 4.875, 5.029}, {150, 4.0998, 4.1587}, {200, 3.773, 3.760},
             {230, 3.504, 3.572}};
  for (const auto& r : ref) {
    EXPECT_NEAR(m.spot_sigma_in_air_mm(r.e, Axis::kX, 0.0), r.sx, 1e-3) << r.e;
    EXPECT_NEAR(m.spot_sigma_in_air_mm(r.e, Axis::kY, 0.0), r.sy, 1e-3) << r.e;
  }
  // At z = −600 mm (the optics plane) σ is the table's σ0.
  EXPECT_NEAR(m.spot_sigma_in_air_mm(70.0, Axis::kX, -600.0), 4.186392496, 1e-9);
}

TEST(BeamModel, TabulatedDepthDoseReproducesTheMonteCarloR80AtTabulatedEnergies) {
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  // idd_summary.csv: R80 70 MeV 40.38, 150 MeV 157.76, 230 MeV 329.81 mm.
  EXPECT_NEAR(m.depth_dose(70.0).r80_mm(), 40.38, 0.005);
  EXPECT_NEAR(m.depth_dose(150.0).r80_mm(), 157.76, 0.005);
  EXPECT_NEAR(m.depth_dose(230.0).range_mm(), 329.81, 0.005);
  // Energy per proton deposited in the box (idd_summary: 143.905 MeV at 150 MeV).
  EXPECT_NEAR(m.depth_dose(150.0).cidd_mev(1000.0), 143.905, 0.01);
}

TEST(BeamModel, EnergyOutsideTheMachineIsInputErrorNamingValueAndRange) {
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  std::string msg = message_of<InputError>([&] { m.depth_dose(235.0); });
  EXPECT_NE(msg.find("235 MeV"), std::string::npos) << msg;
  EXPECT_NE(msg.find("accepted 70 to 230 MeV"), std::string::npos) << msg;
  msg = message_of<InputError>([&] { m.protons_per_mu(69.9); });
  EXPECT_NE(msg.find("69.9 MeV"), std::string::npos) << msg;
  EXPECT_THROW(m.spot_sigma_in_air_mm(250.0, Axis::kX, 0.0), InputError);
  EXPECT_THROW(m.mean_energy_mev(std::nan("")), InputError);
}

TEST(BeamModel, PlanSpotSizePolicyRescalesSigma0ToTheFwhmAtTheIsocentre) {
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  const double fwhm = 9.9;  // DCPT plans: ScanningSpotSize 9.9 × 9.3 mm
  const double s_iso = m.spot_sigma_in_air_mm(150.0, Axis::kX, 0.0, SpotSizePolicy::kPlanSpotSizeAtIsocentre, fwhm);
  EXPECT_NEAR(s_iso, fwhm / kFwhmPerSigma, 1e-12);
  const AxisEmittance e = m.spot_emittance(150.0, Axis::kX, SpotSizePolicy::kPlanSpotSizeAtIsocentre, fwhm);
  EXPECT_EQ(e.sigma_theta_rad, m.emittance(150.0, Axis::kX).sigma_theta_rad);
  EXPECT_NE(e.sigma_mm, m.emittance(150.0, Axis::kX).sigma_mm);
  // The beam-model policy ignores the plan's size.
  EXPECT_EQ(m.spot_sigma_in_air_mm(150.0, Axis::kX, 0.0, SpotSizePolicy::kBeamModel, fwhm),
            m.spot_sigma_in_air_mm(150.0, Axis::kX, 0.0));
}

TEST(BeamModel, PlanSpotSizePolicyWithoutAFwhmIsInputError) {
  const BeamModel m = load_machine("DCPT_ProBeam_v5");
  std::string msg = message_of<InputError>(
      [&] { m.spot_emittance(150.0, Axis::kY, SpotSizePolicy::kPlanSpotSizeAtIsocentre, std::nullopt); });
  EXPECT_NE(msg.find("no ScanningSpotSize along Y"), std::string::npos) << msg;
  msg = message_of<InputError>(
      [&] { m.spot_emittance(150.0, Axis::kX, SpotSizePolicy::kPlanSpotSizeAtIsocentre, -2.0); });
  EXPECT_NE(msg.find("ScanningSpotSize X = -2 mm"), std::string::npos) << msg;
  msg = message_of<InputError>(
      [&] { m.spot_emittance(150.0, Axis::kX, SpotSizePolicy::kPlanSpotSizeAtIsocentre, 3.0); });
  EXPECT_NE(msg.find("machine DCPT_ProBeam_v5, 150 MeV, axis X"), std::string::npos) << msg;
}

TEST(MachineLoader, UnknownNameIsDataErrorListingTheAvailableMachines) {
  std::string msg = message_of<DataError>([] { load_machine("Generic"); });
  EXPECT_NE(msg.find("machine 'Generic' not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("DCPT_ProBeam_v5"), std::string::npos) << msg;
  msg = message_of<DataError>([] { load_machine("/no/such/folder"); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("DCPT_ProBeam_v5"), std::string::npos) << msg;
}

TEST(MachineLoader, LoadsByPathToTheFolderOrItsMachineFile) {
  const fs::path folder = fs::path(PROTONDOSE_DATA_DIR) / "machines" / "DCPT_ProBeam_v5";
  EXPECT_EQ(load_machine(folder.string()).name(), "DCPT_ProBeam_v5");
  EXPECT_EQ(load_machine((folder / "machine.txt").string()).max_energy_mev(), 230.0);
  const auto names = available_machines();
  EXPECT_NE(std::find(names.begin(), names.end(), "DCPT_ProBeam_v5"), names.end());
}

// A minimal valid machine folder under the test output, with an analytical depth dose.
std::string small_machine(const std::string& folder, const std::string& energies_body,
                          const std::string& extra_keys = "", bool analytical = true) {
  write_file(folder + "/machine.txt",
             "format = protondose-machine 1\nname = Test" + folder.substr(folder.rfind('/') + 1) +
                 "\nvsad_x_mm = 2000\nvsad_y_mm = 1900\nreference_plane_upstream_of_isocentre_mm = 420\n"
                 "energy_table = energies.csv\n" +
                 (analytical ? std::string("depth_dose = analytical-bortfeld\nbortfeld_beta_per_cm = 0.012\n"
                                           "bortfeld_gamma = 0.6\nbortfeld_upstream_wet_mm = 0.45\n")
                             : std::string("depth_dose = tabulated\ndepth_dose_folder = idd\n")) +
                 extra_keys);
  write_file(folder + "/energies.csv",
             "# test machine\nnominal_energy_MeV,mean_energy_MeV,energy_spread_sigma_MeV,protons_per_MU,"
             "sigma_x_mm,sigma_theta_x_rad,correlation_x,sigma_y_mm,sigma_theta_y_rad,correlation_y\n" +
                 energies_body);
  return (fs::path(kOut) / folder).string();
}

const std::string kGoodRows =
    "100,100.2,0.8,8.7e7,5,0.004,0.1,5.5,0.005,-0.2\n"
    "150,150.1,0.9,1.1e8,4,0.003,0.0,4.5,0.004,-0.1\n";

TEST(MachineLoader, ReadsAnAnalyticalMachineFolder) {
  const std::string dir = small_machine("machines_ok/analytical", kGoodRows);
  const BeamModel m = load_machine(dir);
  EXPECT_EQ(m.name(), "Testanalytical");
  EXPECT_EQ(m.vsad_y_mm(), 1900.0);
  EXPECT_EQ(m.depth_dose_library().kind(), DepthDoseLibrary::Kind::kAnalyticalBortfeld);
  EXPECT_EQ(m.depth_dose_library().bortfeld_parameters().upstream_wet_mm, 0.45);
  EXPECT_NEAR(m.protons_per_mu(125.0), 0.5 * (8.7e7 + 1.1e8), 1.0);
  EXPECT_NEAR(m.depth_dose(125.0).r80_mm(), 10.0 * 0.0022 * std::pow(125.15, 1.77), 2.0);
}

TEST(MachineLoader, EnvironmentVariableRedirectsTheMachineFolder) {
  small_machine("datadir_env/machines/EnvMachine", kGoodRows);
  const char* before = std::getenv("PROTONDOSE_DATA_DIR");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("PROTONDOSE_DATA_DIR", (kOut + "/datadir_env").c_str(), 1);
  EXPECT_EQ(load_machine("EnvMachine").vsad_x_mm(), 2000.0);
  const std::string msg = message_of<DataError>([] { load_machine("DCPT_ProBeam_v5"); });
  EXPECT_NE(msg.find("machines available in " + kOut + "/datadir_env/machines: EnvMachine"), std::string::npos)
      << msg;
  if (before != nullptr)
    ::setenv("PROTONDOSE_DATA_DIR", saved.c_str(), 1);
  else
    ::unsetenv("PROTONDOSE_DATA_DIR");
}

TEST(MachineLoader, RejectsUnsortedEnergiesNamingFileRowAndValue) {
  const std::string dir = small_machine("machines_bad/unsorted",
                                        "150,150.1,0.9,1.1e8,4,0.003,0.0,4.5,0.004,-0.1\n"
                                        "100,100.2,0.8,8.7e7,5,0.004,0.1,5.5,0.005,-0.2\n");
  const std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("energies.csv: row 2 (line 4), column nominal_energy_MeV: 100"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not above the previous row's 150 MeV"), std::string::npos) << msg;
}

TEST(MachineLoader, RejectsNonPositiveSpotSizeNamingFileRowAndValue) {
  const std::string dir = small_machine("machines_bad/sigma", "100,100.2,0.8,8.7e7,5,0.004,0.1,5.5,0.005,-0.2\n"
                                                              "150,150.1,0.9,1.1e8,4,0.003,0.0,-4.5,0.004,-0.1\n");
  const std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("row 2 (line 4), column sigma_y_mm: -4.5 must be > 0"), std::string::npos) << msg;
}

TEST(MachineLoader, RejectsCorrelationOutsideMinusOneToOne) {
  const std::string dir = small_machine("machines_bad/rho", "100,100.2,0.8,8.7e7,5,0.004,1.2,5.5,0.005,-0.2\n");
  const std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("row 1 (line 3), column correlation_x: 1.2 must lie in (-1, 1)"), std::string::npos) << msg;
}

TEST(MachineLoader, RejectsRowsShorterThanTheHeader) {
  const std::string dir = small_machine("machines_bad/short", "100,100.2,0.8,8.7e7,5,0.004\n");
  const std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("row 1 (line 3) has 6 cells, the header has 10"), std::string::npos) << msg;
}

TEST(MachineLoader, RejectsUnknownFormatAndDepthDoseKind) {
  std::string dir = small_machine("machines_bad/format", kGoodRows);
  write_file("machines_bad/format/machine.txt", "format = protondose-machine 7\nname = X\n");
  std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("line 1: format 'protondose-machine 7'"), std::string::npos) << msg;
  dir = small_machine("machines_bad/kind", kGoodRows, "");
  write_file("machines_bad/kind/machine.txt",
             "format = protondose-machine 1\nname = K\nvsad_x_mm = 1\nvsad_y_mm = 1\n"
             "reference_plane_upstream_of_isocentre_mm = 1\nenergy_table = energies.csv\ndepth_dose = generic\n");
  msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("depth_dose = 'generic' (accepted: tabulated, analytical-bortfeld)"), std::string::npos) << msg;
}

TEST(MachineLoader, RejectsAMissingKeyAndANonNumericValue) {
  std::string dir = small_machine("machines_bad/nokey", kGoodRows);
  write_file("machines_bad/nokey/machine.txt",
             "format = protondose-machine 1\nname = K\nvsad_x_mm = 1\n"
             "reference_plane_upstream_of_isocentre_mm = 1\nenergy_table = energies.csv\n"
             "depth_dose = analytical-bortfeld\nbortfeld_beta_per_cm = 0.012\nbortfeld_gamma = 0.6\n"
             "bortfeld_upstream_wet_mm = 0\n");
  std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("missing key 'vsad_y_mm'"), std::string::npos) << msg;
  dir = small_machine("machines_bad/nan", kGoodRows, "");
  write_file("machines_bad/nan/machine.txt",
             "format = protondose-machine 1\nname = K\nvsad_x_mm = 1\nvsad_y_mm = two\n"
             "reference_plane_upstream_of_isocentre_mm = 1\nenergy_table = energies.csv\n"
             "depth_dose = analytical-bortfeld\nbortfeld_beta_per_cm = 0.012\nbortfeld_gamma = 0.6\n"
             "bortfeld_upstream_wet_mm = 0\n");
  msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("line 4, key vsad_y_mm: 'two' is not a finite number"), std::string::npos) << msg;
}

TEST(MachineLoader, TabulatedIddErrorsNameTheIddFileRowAndValue) {
  const std::string dir = small_machine("machines_bad/idd", kGoodRows, "", false);
  write_file("machines_bad/idd/idd/index.csv", "nominal_energy_MeV,file\n100,e100.csv\n150,e150.csv\n");
  write_file("machines_bad/idd/idd/e100.csv", "depth_mm,idd_MeV_cm2_per_g_per_proton\n0.5,7\n1.5,30\n2.5,0\n");
  write_file("machines_bad/idd/idd/e150.csv", "depth_mm,idd_MeV_cm2_per_g_per_proton\n0.5,5\n0.4,30\n2.5,0\n");
  const std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("e150.csv: row 2 (line 3), column depth_mm: depth 0.4 mm"), std::string::npos) << msg;
}

TEST(MachineLoader, EnergyTableAndDepthDosesMustOverlap) {
  const std::string dir = small_machine("machines_bad/overlap", kGoodRows, "", false);
  write_file("machines_bad/overlap/idd/index.csv", "nominal_energy_MeV,file\n200,e.csv\n");
  write_file("machines_bad/overlap/idd/e.csv", "depth_mm,idd_MeV_cm2_per_g_per_proton\n0.5,7\n1.5,30\n2.5,0\n");
  const std::string msg = message_of<DataError>([&] { load_machine(dir); });
  EXPECT_NE(msg.find("do not overlap"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------
// DCPT emittance CSV and MCsquare BDL

TEST(MachineLoader, DcptCsvV5AndV2CarryTheirReferencePlanes) {
  const fs::path dir = kShared / "data" / "beam-models" / "dcpt-probeam";
  SKIP_WITHOUT_SHARED(dir);
  const BeamModel v5 = load_dcpt_emittance_csv(dir / "DCPT_beam_model__v5.csv", "DCPT_v5", 2000.0, 2560.0);
  const BeamModel v2 = load_dcpt_emittance_csv(dir / "DCPT_beam_model__v2.csv", "DCPT_v2", 2000.0, 2560.0);
  EXPECT_EQ(v5.reference_plane_upstream_of_isocentre_mm(), 600.0);
  EXPECT_EQ(v2.reference_plane_upstream_of_isocentre_mm(), 500.0);
  EXPECT_EQ(v5.energy_table().size(), 1741u);
  EXPECT_EQ(v5.max_energy_mev(), 244.0);
  EXPECT_DOUBLE_EQ(v5.mean_energy_mev(70.1), 70.23866361);
  EXPECT_DOUBLE_EQ(v2.energy_spread_mev(70.0), 1.23);
  EXPECT_EQ(v5.depth_dose_library().kind(), DepthDoseLibrary::Kind::kAnalyticalBortfeld);
  EXPECT_NEAR(v5.depth_dose_library().bortfeld_parameters().upstream_wet_mm, 600.0 * kAirWetPerMm, 1e-12);
  // The same optics as the shipped machine at its 1 MeV rows.
  const BeamModel shipped = load_machine("DCPT_ProBeam_v5");
  EXPECT_NEAR(v5.spot_sigma_in_air_mm(150.0, Axis::kY, 0.0), shipped.spot_sigma_in_air_mm(150.0, Axis::kY, 0.0), 1e-9);
  // A DCPT CSV given to load_machine is refused with the reason.
  const std::string msg = message_of<DataError>([&] { load_machine((dir / "DCPT_beam_model__v5.csv").string()); });
  EXPECT_NE(msg.find("load_dcpt_emittance_csv"), std::string::npos) << msg;
}

TEST(MachineLoader, DcptCsvWithoutBmodposIsDataError) {
  const std::string path = write_file("dcpt_no_bmodpos.csv",
                                      "#\"DCPT beam model\",,,,,,,,,\n"
                                      "#\"Energy nominal [MeV]\",\"# E real [MeV]\",\"# E real sigma [MeV]\",\"# protons/MU\","
                                      "\"# sigma x [mm]\",\"# sigma y [mm]\",\"# sigma x' [rad]\",\"# sigma y' [rad]\","
                                      "\"# cor(x x')\",\"# cor(y y')\"\n"
                                      "70,70.1,0.8,2e6,4.1,3.7,0.0067,0.0066,0.04,0.22\n");
  const std::string msg = message_of<DataError>([&] { load_dcpt_emittance_csv(path, "x", 2000, 2560); });
  EXPECT_NE(msg.find("no 'BMODPOS <distance> mm' header line"), std::string::npos) << msg;
}

TEST(MachineLoader, DcptCsvBadValueNamesFileRowColumnAndValue) {
  const std::string path = write_file("dcpt_bad_value.csv",
                                      "#\"BMODPOS 600.0 mm\",,,,,,,,,\n"
                                      "#\"Energy nominal [MeV]\",\"# E real [MeV]\",\"# E real sigma [MeV]\",\"# protons/MU\","
                                      "\"# sigma x [mm]\",\"# sigma y [mm]\",\"# sigma x' [rad]\",\"# sigma y' [rad]\","
                                      "\"# cor(x x')\",\"# cor(y y')\"\n"
                                      "70,70.1,0.8,2e6,4.1,3.7,0.0067,0.0066,0.04,0.22\n"
                                      "71,71.1,0.8,2e6,4.1,3.7,-0.0067,0.0066,0.04,0.22\n");
  const std::string msg = message_of<DataError>([&] { load_dcpt_emittance_csv(path, "x", 2000, 2560); });
  EXPECT_NE(msg.find("row 2 (line 4), column sigma x' [rad]: -0.0067 must be >= 0"), std::string::npos) << msg;
}

TEST(MachineLoader, McsquareBdlMatchesTheShippedMachine) {
  const fs::path bdl = kShared / "reference" / "BDL_DCPT_ProBeam_v5.txt";
  SKIP_WITHOUT_SHARED(bdl);
  const BeamModel b = load_machine(bdl.string());
  const BeamModel shipped = load_machine("DCPT_ProBeam_v5");
  EXPECT_EQ(b.name(), "BDL_DCPT_ProBeam_v5");
  EXPECT_EQ(b.vsad_x_mm(), 2000.0);
  EXPECT_EQ(b.vsad_y_mm(), 2560.0);
  EXPECT_EQ(b.reference_plane_upstream_of_isocentre_mm(), 600.0);
  EXPECT_EQ(b.energy_table().size(), 175u);
  for (double e : {70.0, 123.0, 200.0}) {
    EXPECT_NEAR(b.mean_energy_mev(e), shipped.mean_energy_mev(e), 1e-5) << e;
    // EnergySpread is a percentage of the nominal energy in MCsquare's BDL.
    EXPECT_NEAR(b.energy_spread_mev(e), shipped.energy_spread_mev(e), 1e-5) << e;
    EXPECT_NEAR(b.protons_per_mu(e), shipped.protons_per_mu(e), 0.6) << e;
    EXPECT_NEAR(b.spot_sigma_in_air_mm(e, Axis::kX, 0.0), shipped.spot_sigma_in_air_mm(e, Axis::kX, 0.0), 1e-4) << e;
  }
}

std::string bdl_text(const std::string& count, const std::string& row) {
  return "--UPenn beam model (double gaussian)--\n\nNozzle exit to Isocenter distance\n420.0\n\n"
         "SMX to Isocenter distance\n2000.0\n\nSMY to Isocenter distance\n1900.0\n\nBeam parameters\n" +
         count +
         " energies\n\nNominalEnergy \t MeanEnergy \t EnergySpread \t ProtonsMU \t Weight1 \t SpotSize1x \t "
         "Divergence1x \t Correlation1x \t SpotSize1y \t Divergence1y \t Correlation1y \t Weight2 \t SpotSize2x \t "
         "Divergence2x \t Correlation2x \t SpotSize2y \t Divergence2y \t Correlation2y\n" +
         row;
}

TEST(MachineLoader, BdlWithASecondGaussianIsUnavailable) {
  const std::string path = write_file(
      "bdl_double.txt", bdl_text("1", "100 100.1 0.8 8e7 0.9 5 0.004 0.1 5 0.004 0.1 0.1 9 0.01 0 9 0.01 0\n"));
  const std::string msg = message_of<UnavailableError>([&] { load_mcsquare_bdl(path); });
  EXPECT_NE(msg.find("row 1 (line 16), column Weight2: 0.1"), std::string::npos) << msg;
}

TEST(MachineLoader, BdlEnergyCountMustMatchTheRows) {
  const std::string path =
      write_file("bdl_count.txt", bdl_text("2", "100 100.1 0.8 8e7 1 5 0.004 0.1 5 0.004 0.1 0 5 0.004 0.1 5 0.004 0.1\n"));
  const std::string msg = message_of<DataError>([&] { load_mcsquare_bdl(path); });
  EXPECT_NE(msg.find("declares 2 energies but lists 1"), std::string::npos) << msg;
}

TEST(MachineLoader, BdlBadNumberNamesFileRowAndText) {
  const std::string path = write_file(
      "bdl_text.txt", bdl_text("1", "100 100.1 0.8 8e7 1 5 0.004 0.1 5 0.004 abc 0 5 0.004 0.1 5 0.004 0.1\n"));
  const std::string msg = message_of<DataError>([&] { load_mcsquare_bdl(path); });
  EXPECT_NE(msg.find("row 1 (line 16), column Correlation1y: 'abc' is not a finite number"), std::string::npos)
      << msg;
}

TEST(BeamModel, ConstructorValidatesGeometryAndTable) {
  const DepthDoseLibrary lib =
      DepthDoseLibrary::analytical({{100.0, 100.0, 0.5}, {200.0, 200.0, 0.5}}, BortfeldParameters{}, "lib");
  BeamModelEnergy row{100.0, 100.0, 0.5, 1e8, {5, 0.004, 0}, {5, 0.004, 0}};
  EXPECT_NE(message_of<DataError>([&] { BeamModel("m", -1.0, 2000.0, 400.0, {row}, lib, "src"); })
                .find("VSAD x -1 mm must be > 0"),
            std::string::npos);
  BeamModelEnergy zero_ppmu = row;
  zero_ppmu.protons_per_mu = 0.0;
  EXPECT_NE(message_of<DataError>([&] { BeamModel("m", 2000.0, 2000.0, 400.0, {zero_ppmu}, lib, "src"); })
                .find("src: energy row 1, protons per MU: 0 must be > 0"),
            std::string::npos);
  EXPECT_THROW(BeamModel("", 2000.0, 2000.0, 400.0, {row}, lib, "src"), DataError);
  EXPECT_THROW(BeamModel("m", 2000.0, 2000.0, 400.0, {}, lib, "src"), DataError);
  EXPECT_THROW(BeamModel("m", 2000.0, 2000.0, 400.0, {row}, DepthDoseLibrary(), "src"), DataError);
  const BeamModel ok("m", 2000.0, 2000.0, 400.0, {row}, lib, "src");
  EXPECT_EQ(ok.min_energy_mev(), 100.0);
  EXPECT_EQ(ok.max_energy_mev(), 100.0);
  const BeamModel swapped = ok.with_depth_doses(
      DepthDoseLibrary::analytical({{90.0, 90.0, 0.5}, {100.0, 101.0, 0.5}}, BortfeldParameters{}, "lib2"));
  EXPECT_NEAR(swapped.depth_dose(100.0).r80_mm(), ok.depth_dose(100.0).r80_mm() + 10.0 / 7.289, 0.1);
}

}  // namespace
}  // namespace protondose::physics
