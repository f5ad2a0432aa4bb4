// `protondose batch` and `robust` through the command line: exit statuses,
// report files, CSV manifests, the Slurm script, and a resumed run.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "batch_case.h"

namespace fs = std::filesystem;

namespace {

/// Runs the protondose executable with `args` (already quoted); returns the exit status, stdout in `out`.
int run_cli(const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(PROTONDOSE_EXE) + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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
  EXPECT_FALSE(fs::exists(dir / "a.dcm"));
}
