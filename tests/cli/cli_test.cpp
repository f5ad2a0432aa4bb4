// The command line as a user meets it: every subcommand's exit code by error
// category (docs/exit-codes.md), its JSON, and the files it writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "protondose/core/error.h"
#include "protondose/core/metaimage.h"
#include "run_command.h"

namespace protondose {
namespace {

namespace fs = std::filesystem;

const std::string kExe = PROTONDOSE_EXE;
const fs::path kShared = PROTONDOSE_SHARED_DIR;
const fs::path kData = PROTONDOSE_DATA_DIR;

using testing::CommandResult;

CommandResult run(const std::string& arguments) { return testing::run_command("'" + kExe + "' " + arguments); }

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(PROTONDOSE_TEST_OUTPUT_DIR) / "cli" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kShared / "reference" / "water_dcpt" / "mc_dose.dcm"))
      GTEST_SKIP() << "shared reference data not found at " << kShared;
  }
  const fs::path water = kShared / "reference" / "water_dcpt";
  const fs::path slab = kShared / "reference" / "slab_dcpt";
};

TEST_F(Cli, HelpAndVersionExitZeroAndAnUnknownSubcommandIsAConfigError) {
  EXPECT_EQ(run("--help > /dev/null").exit_code, 0);
  EXPECT_EQ(run("--version").exit_code, 0);
  EXPECT_EQ(run("frobnicate 2> /dev/null").exit_code, exit_code(ErrorCategory::kConfig));
}

TEST_F(Cli, CompareOfIdenticalDosesPassesAndPrintsJson) {
  const CommandResult r = run("compare '" + (water / "mc_dose.dcm").string() + "' '" + (water / "mc_dose.mhd").string() +
                    "' --gamma 1%/1mm --json --require 99.9 2> /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["gamma"]["pass_rate_percent"].get<double>(), 100.0);
  EXPECT_GT(j["gamma"]["evaluated_voxels"].get<long>(), 10000);
}

TEST_F(Cli, CompareBelowTheRequiredPassRateExitsOne) {
  // The MC dose scaled by 1.05: a 5 % difference everywhere fails 2 %/2 mm in
  // the high-dose region.
  const fs::path dir = fresh_dir("compare_require");
  Volume<float> dose = read_metaimage((water / "mc_dose.mhd").string());
  for (float& v : dose.data) v *= 1.05f;
  write_metaimage((dir / "scaled.mhd").string(), dose);
  const std::string args = "compare '" + (water / "mc_dose.mhd").string() + "' '" + (dir / "scaled.mhd").string() +
                           "' --gamma 2%/2mm --json";
  const CommandResult ok = run(args + " 2> /dev/null");
  ASSERT_EQ(ok.exit_code, 0);
  const double pass_rate = nlohmann::json::parse(ok.out)["gamma"]["pass_rate_percent"].get<double>();
  ASSERT_LT(pass_rate, 99.0) << "the scaled dose must fail somewhere";
  EXPECT_EQ(run(args + " --require 99 > /dev/null 2>&1").exit_code, 1);
  EXPECT_EQ(run(args + " --require " + std::to_string(pass_rate - 1.0) + " > /dev/null 2>&1").exit_code, 0);
}

TEST_F(Cli, CompareOfDosesInDifferentFramesIsAnInputError) {
  EXPECT_EQ(run("compare '" + (water / "mc_dose.dcm").string() + "' '" + (slab / "mc_dose.dcm").string() +
                "' > /dev/null 2>&1")
                .exit_code,
            exit_code(ErrorCategory::kInput));
}

TEST_F(Cli, AnUnknownHaloModelIsAConfigErrorNamingTheAcceptedOnes) {
  const fs::path dir = fresh_dir("halo_model");
  const CommandResult r = run("compute --ct '" + (water / "ct").string() + "' --plan '" + (water / "plan.dcm").string() +
                              "' --machine DCPT_ProBeam_v5 --backend cpu --halo-model gaussian3 --out '" +
                              (dir / "dose.dcm").string() + "' 2>&1");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kConfig)) << r.out;
  EXPECT_NE(r.out.find("mcsquare-fit, soukup-2005"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "dose.dcm"));
}

TEST_F(Cli, AnUnknownScatteringModelIsAConfigErrorNamingTheAcceptedOnes) {
  const fs::path dir = fresh_dir("scattering_model");
  const CommandResult r = run("compute --ct '" + (water / "ct").string() + "' --plan '" + (water / "plan.dcm").string() +
                              "' --machine DCPT_ProBeam_v5 --backend cpu --scattering-model moliere --out '" +
                              (dir / "dose.dcm").string() + "' 2>&1");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kConfig)) << r.out;
  EXPECT_NE(r.out.find("fermi-rossi-highland, differential-highland, differential-moliere"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir / "dose.dcm"));
}

TEST_F(Cli, MalformedGammaCriteriaAreAConfigError) {
  EXPECT_EQ(run("compare '" + (water / "mc_dose.dcm").string() + "' '" + (water / "mc_dose.dcm").string() +
                "' --gamma 3percent > /dev/null 2>&1")
                .exit_code,
            exit_code(ErrorCategory::kConfig));
}

TEST_F(Cli, InspectPrintsThePlanAsJson) {
  const CommandResult r = run("inspect '" + (water / "plan.dcm").string() + "' --json 2> /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("G000"), std::string::npos) << r.out;
  EXPECT_NO_THROW((void)nlohmann::json::parse(r.out));
}

TEST_F(Cli, ComputeOfAMissingCtIsAnIoErrorAndAMissingOutputFolderFailsFirst) {
  const fs::path dir = fresh_dir("compute_errors");
  EXPECT_EQ(run("compute --ct /nonexistent/ct --plan '" + (water / "plan.dcm").string() + "' --out '" +
                (dir / "d.dcm").string() + "' --backend cpu > /dev/null 2>&1")
                .exit_code,
            exit_code(ErrorCategory::kIo));
  EXPECT_EQ(run("compute --ct '" + (water / "ct").string() + "' --plan '" + (water / "plan.dcm").string() +
                "' --out /nonexistent-folder/d.dcm --backend cpu > /dev/null 2>&1")
                .exit_code,
            exit_code(ErrorCategory::kIo));
}

TEST_F(Cli, ComputeOnAnUnavailableGpuIsAnUnavailableErrorNeverAFallback) {
  const CommandResult probe = run("compute --ct '" + (kData / "example" / "ct").string() + "' --plan '" +
                        (kData / "example" / "plan.dcm").string() + "' --out '" +
                        (fresh_dir("gpu_probe") / "d.dcm").string() + "' --backend gpu --grid 9 --ray-pitch 4 "
                        "--depth-step 4 > /dev/null 2>&1");
  if (probe.exit_code == 0) GTEST_SKIP() << "a GPU is usable here: the unavailable path cannot be exercised";
  EXPECT_EQ(probe.exit_code, exit_code(ErrorCategory::kUnavailable));
}

TEST_F(Cli, ComputeOfTheExampleWritesRtDoseMetaImagePngAndJson) {
  const fs::path dir = fresh_dir("compute_example");
  const CommandResult r = run("compute --ct '" + (kData / "example" / "ct").string() + "' --plan '" +
                    (kData / "example" / "plan.dcm").string() + "' --out '" + (dir / "dose.dcm").string() +
                    "' --mhd '" + (dir / "dose.mhd").string() + "' --png '" + (dir / "png").string() +
                    "' --backend cpu --grid 6 --ray-pitch 3 --depth-step 3 --json 2> /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_GT(j["max_dose_gy_plan"].get<double>(), 1.0);
  EXPECT_EQ(j["spots"].get<int>(), 1782);
  for (const char* file : {"dose.dcm", "dose.mhd", "dose.raw", "png/dose_over_ct_axial.png"})
    EXPECT_TRUE(fs::exists(dir / file)) << file;
  const Volume<float> dose = read_metaimage((dir / "dose.mhd").string());
  EXPECT_DOUBLE_EQ(dose.grid.spacing_mm[0], 6.0);
  // The process around the engine: each stage timed, none on the GPU here;
  // the engine stage holds the engine's own computation (its total without
  // the CT conversion, which runs before it).
  const auto& p = j["process_timings_s"];
  for (const char* stage : {"read_ct", "read_plan", "engine_setup", "engine", "write_outputs"})
    EXPECT_GT(p[stage].get<double>(), 0.0) << stage;
  for (const char* stage : {"gpu_context", "gpu_kernels"}) EXPECT_EQ(p[stage].get<double>(), 0.0) << stage;
  EXPECT_GE(p["gpu_start_wait"].get<double>(), 0.0);
  EXPECT_GT(j["timings_s"]["hu_conversion"].get<double>(), 0.0);
  EXPECT_GE(p["engine"].get<double>() + 1e-6,
            j["timings_s"]["total"].get<double>() - j["timings_s"]["hu_conversion"].get<double>());
}

}  // namespace
}  // namespace protondose
