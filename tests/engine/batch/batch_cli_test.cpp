// `protondose batch` and `robust` through the command line: exit statuses,
// report files, CSV manifests, the Slurm script, and a resumed run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "batch_case.h"
#include "protondose/dicom/rt_dose.h"
#include "registration_writer.h"
#include "run_command.h"

namespace fs = std::filesystem;

namespace {

/// Runs the protondose executable with `args` (already quoted); returns the
/// exit status, stdout in `out` (and stderr after it with `with_stderr`).
int run_cli(const std::string& args, std::string* out = nullptr, bool with_stderr = false) {
  const protondose::testing::CommandResult r =
      protondose::testing::run_command(std::string(PROTONDOSE_EXE) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
  if (out) *out = r.out;
  return r.exit_code;
}

const std::string kExample = PROTONDOSE_DATA_DIR "/example";

}  // namespace

TEST(BatchCli, ACsvBatchWithOneBrokenJobExitsOneWritesReportsAndResumes) {
  const auto dir = batch_test::fresh_dir();
  fs::create_directories(dir / "out");
  batch_test::write_text(dir / "not_a_plan.dcm", "not DICOM");
  batch_test::write_text(dir / "m.csv", "id,ct,plan,out,grid_mm,shift_mm\n"
                                        "good," + kExample + "/ct," + kExample + "/plan.dcm,out/good.dcm,6,0;3;0\n"
                                        "broken," + kExample + "/ct,not_a_plan.dcm,out/broken.dcm,6,\n");
  const std::string args = "-q batch " + (dir / "m.csv").string() + " --workers 1 --threads 2 --ray-pitch 3 --depth-step 2";
  ASSERT_EQ(run_cli(args), 1);  // ran, one job failed
  EXPECT_TRUE(fs::exists(dir / "out" / "good.dcm"));
  EXPECT_FALSE(fs::exists(dir / "out" / "broken.dcm"));
  EXPECT_EQ(batch_test::read_lines(dir / "records.jsonl").size(), 2u);
  std::ifstream in(dir / "summary.json");
  const nlohmann::json s = nlohmann::json::parse(in);
  EXPECT_EQ(s["ok"], 1);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(s["failures"][0]["id"], "broken");
  EXPECT_EQ(s["failures"][0]["category"], "input");
  EXPECT_TRUE(fs::exists(dir / "summary.txt"));

  // The re-run skips the good job; the merge of the only records file agrees.
  ASSERT_EQ(run_cli(args), 1);
  const auto lines = batch_test::read_lines(dir / "records.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) {
    const nlohmann::json r = nlohmann::json::parse(l);
    EXPECT_EQ(r["status"], r["id"] == "good" ? "skipped" : "failed") << l;
  }
  EXPECT_EQ(run_cli("-q batch " + (dir / "m.csv").string() + " --merge"), 1);
}

TEST(BatchCli, BadManifestsAndMissingGpusExitWithTheirCategory) {
  const auto dir = batch_test::fresh_dir();
  batch_test::write_text(dir / "m.json", R"([{"id": "a", "ct": "nope", "plan": "nope.dcm", "out": "a.dcm"}])");
  EXPECT_EQ(run_cli("batch " + (dir / "m.json").string()), 3);  // input
  batch_test::write_text(dir / "ok.json", "[{\"id\": \"a\", \"ct\": \"" + kExample + "/ct\", \"plan\": \"" + kExample +
                                              "/plan.dcm\", \"out\": \"a.dcm\"}]");
  EXPECT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --gpus 99"), 7);  // unavailable: no such device
  EXPECT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --shard 4/4"), 2);  // config
  // Contradictory placements are config errors, checked before any device lookup.
  std::string output;
  EXPECT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --gpus 0 --backend cpu", &output, true), 2) << output;
  EXPECT_NE(output.find("--gpus 0 with --backend cpu"), std::string::npos) << output;
  EXPECT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --gpus 0 --workers 3", &output, true), 2) << output;
  EXPECT_NE(output.find("--workers with --gpus"), std::string::npos) << output;
  EXPECT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --writers -1", &output, true), 2) << output;
  EXPECT_NE(output.find("--writers -1: need at least 1"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(dir / "a.dcm"));
}

TEST(BatchCli, SlurmScriptIsPrintedForTheManifest) {
  const auto dir = batch_test::fresh_dir();
  batch_test::write_text(dir / "ok.json", "[{\"id\": \"a\", \"ct\": \"" + kExample + "/ct\", \"plan\": \"" + kExample +
                                              "/plan.dcm\", \"out\": \"a.dcm\"}]");
  std::string script;
  ASSERT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --slurm-script --array-size 3 --gpus-per-task 1 --threads 1",
                    &script),
            0);
  EXPECT_NE(script.find("#SBATCH --array=0-2"), std::string::npos) << script;
  EXPECT_NE(script.find("--shard \"${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}\""), std::string::npos) << script;
  EXPECT_NE(script.find("--threads 1"), std::string::npos) << script;
  EXPECT_NE(script.find((dir / "ok.json").string()), std::string::npos) << script;
  // GPU tasks place their workers with --gpus and --workers-per-gpu, never --workers
  // (the batch command refuses both together).
  ASSERT_EQ(run_cli("batch " + (dir / "ok.json").string() + " --slurm-script --gpus-per-task 1 --gpus all", &script), 0);
  EXPECT_NE(script.find("--gpus 'all' --workers-per-gpu 1"), std::string::npos) << script;
  EXPECT_EQ(script.find("--workers "), std::string::npos) << script;
  EXPECT_FALSE(fs::exists(dir / "a.dcm"));
}

TEST(BatchCli, ARegisteredJobOnTheExamplePlanMatchesTheEquivalentShift) {
  // The real readers end to end: the example CT re-labelled into a new frame of
  // reference, a REG translating the plan's frame by +t onto it, against the
  // same CT in the plan's frame with shift_mm = −t.
  const auto dir = batch_test::fresh_dir();
  fs::create_directories(dir / "out");
  protondose::CtImage ct = protondose::dicom::read_ct_series(kExample + "/ct");
  const std::string plan_frame = ct.frame_of_reference_uid;
  ct.frame_of_reference_uid = "2.25.616161";
  protondose::dicom::write_ct_series(ct, (dir / "ct_new").string());
  protondose::testing::write_registration((dir / "reg.dcm").string(), "2.25.616161",
                                          {{plan_frame, {{protondose::testing::reg_translation(3, -6, 9)}}}});
  batch_test::write_text(dir / "m.json", "[{\"id\": \"shift\", \"ct\": \"" + kExample + "/ct\", \"plan\": \"" + kExample +
                                             "/plan.dcm\", \"out\": \"out/shift.dcm\", \"grid_mm\": 6, \"shift_mm\": [-3, 6, -9]},"
                                             " {\"id\": \"reg\", \"ct\": \"ct_new\", \"plan\": \"" + kExample +
                                             "/plan.dcm\", \"out\": \"out/reg.dcm\", \"grid_mm\": 6, \"registration\": \"reg.dcm\"}]");
  ASSERT_EQ(run_cli("-q batch " + (dir / "m.json").string() + " --workers 1 --threads 2 --ray-pitch 3 --depth-step 2"), 0);
  const auto shift = protondose::dicom::read_rt_dose((dir / "out" / "shift.dcm").string());
  const auto reg = protondose::dicom::read_rt_dose((dir / "out" / "reg.dcm").string());
  EXPECT_EQ(shift.frame_of_reference_uid, plan_frame);
  EXPECT_EQ(reg.frame_of_reference_uid, "2.25.616161");
  ASSERT_EQ(reg.dose_gy.grid.size, shift.dose_gy.grid.size);
  const float dmax = *std::max_element(shift.dose_gy.data.begin(), shift.dose_gy.data.end());
  ASSERT_GT(dmax, 0.0f);
  double worst = 0;
  for (std::size_t v = 0; v < shift.dose_gy.data.size(); ++v)
    worst = std::max(worst, static_cast<double>(std::abs(reg.dose_gy.data[v] - shift.dose_gy.data[v])));
  EXPECT_LE(worst, 1e-5 * dmax) << "largest difference " << worst << " Gy of " << dmax << " Gy";
  std::ifstream in(dir / "records.jsonl");
  std::string line;
  bool seen = false;
  while (std::getline(in, line)) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["id"] != "reg") continue;
    seen = true;
    EXPECT_EQ(r["registration"]["ct_from_plan"][7], -6.0) << line;
  }
  EXPECT_TRUE(seen);
}

TEST(RobustCli, TwoCpuWorkersWriteTheOneWorkerMinimumAndMaximum) {
  const auto dir = batch_test::fresh_dir();
  // Four scenarios on two range errors: the workers share the prepared CTs.
  batch_test::write_text(dir / "scenarios.csv", "name,x_mm,y_mm,z_mm,range_pct\n"
                                                "nominal,0,0,0,0\n"
                                                "left3,-3,0,0,0\n"
                                                "up3_long,0,0,3,3.5\n"
                                                "long,0,0,0,3.5\n");
  const std::string common = "-q robust --ct " + kExample + "/ct --plan " + kExample + "/plan.dcm --backend cpu --grid 6 " +
                             "--ray-pitch 3 --depth-step 2 --scenarios " + (dir / "scenarios.csv").string();
  ASSERT_EQ(run_cli(common + " --workers 1 --out-dir " + (dir / "one").string()), 0);
  ASSERT_EQ(run_cli(common + " --workers 2 --out-dir " + (dir / "two").string()), 0);
  for (const char* run : {"one", "two"}) {
    std::ifstream in(dir / run / "robust.json");
    const nlohmann::json r = nlohmann::json::parse(in);
    EXPECT_EQ(r["workers"], std::string(run) == "one" ? 1 : 2) << run;
    EXPECT_EQ(r["gpu_devices"], nlohmann::json::array()) << run;
    EXPECT_EQ(r["backend"], "cpu") << run;
    ASSERT_EQ(r["scenarios"].size(), 4u) << run;
    EXPECT_EQ(r["scenarios"][2]["name"], "up3_long") << run;  // in scenario order, whoever computed it
    for (const auto& s : r["scenarios"]) {
      EXPECT_EQ(s["device"], -1) << run;
      EXPECT_TRUE(s["worker"] >= 0 && s["worker"] < r["workers"]) << s.dump();
    }
    // Delivered in order, all before the last RT Dose is written; the warm
    // rate is the 3 scenarios after the first over that span.
    double previous = 0.0;
    for (const auto& s : r["scenarios"]) {
      EXPECT_GE(s["delivered_at_s"].get<double>(), previous) << run;
      previous = s["delivered_at_s"].get<double>();
    }
    const double written = r["outputs_written_s"].get<double>();
    EXPECT_GE(written, previous) << run;
    EXPECT_NEAR(r["warm_scenarios_per_s"].get<double>(),
                3.0 / (written - r["scenarios"][0]["delivered_at_s"].get<double>()), 1e-9)
        << run;
  }
  for (const char* file : {"dose_min.dcm", "dose_max.dcm", "dose_nominal.dcm"}) {
    const auto one = protondose::dicom::read_rt_dose((dir / "one" / file).string());
    const auto two = protondose::dicom::read_rt_dose((dir / "two" / file).string());
    ASSERT_GT(*std::max_element(one.dose_gy.data.begin(), one.dose_gy.data.end()), 0.0f) << file;
    EXPECT_EQ(two.dose_gy.grid, one.dose_gy.grid) << file;
    EXPECT_EQ(two.dose_gy.data, one.dose_gy.data) << file;
  }
  // The band is real: the comparison above could fail.
  const auto lo = protondose::dicom::read_rt_dose((dir / "one" / "dose_min.dcm").string());
  const auto hi = protondose::dicom::read_rt_dose((dir / "one" / "dose_max.dcm").string());
  EXPECT_NE(lo.dose_gy.data, hi.dose_gy.data);
}

TEST(RobustCli, GpusWithTheCpuBackendIsAConfigError) {
  const auto dir = batch_test::fresh_dir();
  const std::string common = "robust --ct " + kExample + "/ct --plan " + kExample + "/plan.dcm --out-dir " +
                             (dir / "out").string();
  std::string output;
  // Config (2) also where no GPU exists: the backend is checked before the device list.
  EXPECT_EQ(run_cli(common + " --gpus 0 --backend cpu", &output, true), 2) << output;
  EXPECT_NE(output.find("--gpus 0 with --backend cpu"), std::string::npos) << output;
  EXPECT_EQ(run_cli(common + " --backend cpu --workers-per-gpu 2", &output, true), 2) << output;
  EXPECT_NE(output.find("--workers-per-gpu 2 needs --gpus"), std::string::npos) << output;
  EXPECT_EQ(run_cli(common + " --backend cpu --workers 0", &output, true), 2) << output;
  EXPECT_NE(output.find("--workers 0: need at least 1"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(dir / "out"));  // refused before anything is read or written
}
