// The batch runner end to end on a tiny water box: failure isolation, resume,
// kill -9, workers, the CT cache, comparisons and flags, merging shards.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "batch_case.h"
#include "expect_error.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/dose_engine.h"

namespace pe = protondose::engine;
namespace fs = std::filesystem;
using batch_test::manifest_of;
using batch_test::TinyCase;

namespace {

const pe::JobRecord& record(const pe::BatchSummary& s, const std::string& id) {
  for (const auto& r : s.records)
    if (r.id == id) return r;
  throw std::runtime_error("no record for " + id);
}

std::vector<float> read_dose(const std::string& path) { return protondose::dicom::read_rt_dose(path).dose_gy.data; }

}  // namespace

TEST(BatchRun, AFailingJobIsRecordedWithItsCategoryAndTheBatchGoesOn) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  pe::BatchJob shifted = c.job("shifted");
  shifted.shift_mm = {4, 0, 0};
  const pe::Manifest m = manifest_of(dir, {c.job("good"), c.job("bad_ct", "plan100.txt", "badct"),
                                           c.job("energy_500", "plan500.txt"), shifted});
  const pe::BatchSummary s = pe::run_batch(m, batch_test::fast_options(dir), batch_test::test_io());
  EXPECT_EQ(s.ok, 2u);
  EXPECT_EQ(s.failed, 2u);
  EXPECT_FALSE(s.all_succeeded());
  EXPECT_EQ(record(s, "good").status, "ok");
  EXPECT_EQ(record(s, "shifted").status, "ok");
  const pe::JobRecord& bad = record(s, "bad_ct");
  EXPECT_EQ(bad.status, "failed");
  EXPECT_EQ(bad.category, "input");
  EXPECT_NE(bad.message.find("badct"), std::string::npos) << bad.message;
  const pe::JobRecord& energy = record(s, "energy_500");
  EXPECT_EQ(energy.status, "failed");
  EXPECT_EQ(energy.category, "input");
  EXPECT_NE(energy.message.find("500"), std::string::npos) << energy.message;
  // Good outputs are complete RT Dose files with dose in them; failed ones do not exist.
  EXPECT_GT(record(s, "good").max_dose_gy, 0.0);
  const std::vector<float> good = read_dose(c.job("good").out_path);
  EXPECT_GT(*std::max_element(good.begin(), good.end()), 0.0f);
  EXPECT_FALSE(fs::exists(c.job("bad_ct").out_path));
  EXPECT_FALSE(fs::exists(c.job("energy_500").out_path));
  EXPECT_TRUE(fs::exists(pe::sidecar_path(c.job("good").out_path)));
  // One record line per job, in the order they finished.
  EXPECT_EQ(batch_test::read_lines(dir / "records.jsonl").size(), 4u);
  const nlohmann::json j = pe::to_json(s);
  EXPECT_EQ(j["failures"].size(), 2u);
  EXPECT_NE(pe::format_summary_table(s).find("2 ok, 2 failed"), std::string::npos);
}

TEST(BatchRun, ARerunSkipsUpToDateJobsAndRecomputesChangedOnesOrAllWithForce) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  batch_test::write_text(dir / "planA.txt", "energy_mev=100\n");
  const pe::Manifest m = manifest_of(dir, {c.job("a", "planA.txt"), c.job("b")});
  const auto o = batch_test::fast_options(dir);
  const pe::BatchSummary first = pe::run_batch(m, o, batch_test::test_io());
  ASSERT_EQ(first.ok, 2u);
  const auto mtime_b = fs::last_write_time(c.job("b").out_path);

  const pe::BatchSummary second = pe::run_batch(m, o, batch_test::test_io());
  EXPECT_EQ(second.skipped, 2u);
  EXPECT_EQ(second.ok, 0u);
  EXPECT_TRUE(second.all_succeeded());
  EXPECT_EQ(record(second, "a").max_dose_gy, record(first, "a").max_dose_gy);  // the record comes from the sidecar

  batch_test::write_text(dir / "planA.txt", "energy_mev=120\n");  // the input changed
  const pe::BatchSummary third = pe::run_batch(m, o, batch_test::test_io());
  EXPECT_EQ(record(third, "a").status, "ok");
  EXPECT_EQ(record(third, "b").status, "skipped");
  EXPECT_EQ(fs::last_write_time(c.job("b").out_path), mtime_b);

  // A changed option (the protondose version) or a damaged output also recomputes.
  auto o2 = o;
  o2.version = "test-2";
  EXPECT_EQ(pe::run_batch(m, o2, batch_test::test_io()).ok, 2u);
  { std::ofstream(c.job("b").out_path, std::ios::app) << "x"; }
  const pe::BatchSummary fifth = pe::run_batch(m, o2, batch_test::test_io());
  EXPECT_EQ(record(fifth, "b").status, "ok");
  EXPECT_EQ(record(fifth, "a").status, "skipped");

  auto forced = o2;
  forced.force = true;
  EXPECT_EQ(pe::run_batch(m, forced, batch_test::test_io()).ok, 2u);
}

TEST(BatchRun, KillNineInTheMiddleLeavesNoPartialFileAndTheRerunResumes) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  std::vector<pe::BatchJob> jobs;
  for (int i = 0; i < 10; ++i) {
    pe::BatchJob j = c.job("j" + std::to_string(i), "plan120.txt");
    j.shift_mm = {0, 0, 4.0 * (i % 3)};
    j.grid_mm = 2.0;  // finer output grid: each job takes long enough to be interrupted
    jobs.push_back(j);
  }
  const pe::Manifest m = manifest_of(dir, jobs);
  const auto o = batch_test::fast_options(dir);
  const fs::path records = dir / "records.jsonl";

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      pe::run_batch(m, o, batch_test::test_io());
    } catch (...) {
    }
    ::_exit(0);
  }
  // Kill it as soon as the first record appears.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(records) || batch_test::read_lines(records).empty()))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the batch finished before it could be killed";
  const auto recorded = batch_test::read_lines(records);
  ASSERT_GE(recorded.size(), 1u);
  ASSERT_LT(recorded.size(), jobs.size()) << "every job finished before the kill: the test proves nothing";
  std::set<std::string> done_before;
  for (const auto& line : recorded) {
    const nlohmann::json r = nlohmann::json::parse(line);
    if (r["status"] == "ok") done_before.insert(r["id"].get<std::string>());
  }
  // Whatever exists under an output's name is a complete RT Dose.
  for (const auto& j : jobs)
    if (fs::exists(j.out_path)) {
      EXPECT_NO_THROW(protondose::dicom::read_rt_dose(j.out_path)) << j.out_path;
    }

  const pe::BatchSummary resumed = pe::run_batch(m, o, batch_test::test_io());
  EXPECT_TRUE(resumed.all_succeeded());
  for (const auto& r : resumed.records) {
    if (done_before.count(r.id)) {
      EXPECT_EQ(r.status, "skipped") << r.id << " was complete before the kill and must not be recomputed";
    } else {
      EXPECT_TRUE(r.status == "ok" || r.status == "skipped") << r.id;
    }
  }
  EXPECT_EQ(resumed.ok + resumed.skipped, jobs.size());
  for (const auto& e : fs::directory_iterator(dir / "out"))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
}

TEST(BatchRun, SeveralWorkersGiveTheSameDosesBitwiseAsOneAndAsTheEngineDirectly) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  std::vector<pe::BatchJob> jobs;
  for (int i = 0; i < 4; ++i) {
    pe::BatchJob j = c.job("j" + std::to_string(i));
    j.shift_mm = {4.0 * (i - 1), 0, 0};
    j.rsp_scale = i == 3 ? 1.035 : 1.0;
    jobs.push_back(j);
  }
  auto o = batch_test::fast_options(dir);
  o.workers = 1;
  const pe::BatchSummary one = pe::run_batch(manifest_of(dir, jobs), o, batch_test::test_io());
  ASSERT_EQ(one.ok, 4u);
  std::vector<std::vector<float>> doses;
  for (const auto& j : jobs) doses.push_back(read_dose(j.out_path));
  // The CT folder was read once and shared by the four jobs.
  EXPECT_EQ(one.ct_loads, 1u);
  EXPECT_EQ(one.ct_hits, 3u);

  o.workers = 3;
  o.writers = 3;  // writers in parallel too: every output and record, each once
  o.force = true;
  const pe::BatchSummary three = pe::run_batch(manifest_of(dir, jobs), o, batch_test::test_io());
  ASSERT_EQ(three.records.size(), 4u);
  ASSERT_EQ(three.ok, 4u);
  std::set<int> used;
  for (const auto& r : three.records) used.insert(r.worker);
  EXPECT_GE(used.size(), 1u);
  for (std::size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(read_dose(jobs[i].out_path), doses[i]) << jobs[i].id;

  // The batch computes what the engine computes for the shifted plan and scaled curve.
  pe::DoseEngineOptions eo;
  eo.ray_pitch_mm = 2;
  eo.depth_step_mm = 2;
  eo.threads = 1;
  const protondose::CtImage ct = protondose::dicom::read_ct_series(jobs[3].ct_dir);
  const pe::DoseEngine engine(protondose::physics::load_machine("DCPT_ProBeam_v5"),
                              pe::scaled_hu_curve(protondose::physics::default_hu_curve(), 1.035), eo);
  const pe::DoseResult direct = engine.compute(ct, pe::shifted_plan(batch_test::tiny_plan(100), jobs[3].shift_mm));
  const protondose::Volume<float> from_file = protondose::dicom::read_rt_dose(jobs[3].out_path).dose_gy;
  ASSERT_EQ(from_file.data.size(), direct.dose_gy.data.size());
  // RT Dose stores 32-bit integers × DoseGridScaling: equal within one quantum.
  const float quantum = direct.max_dose_gy / 4294967295.0f;
  for (std::size_t v = 0; v < direct.dose_gy.data.size(); ++v)
    ASSERT_NEAR(from_file.data[v], direct.dose_gy.data[v], 2 * quantum + 1e-12f) << "voxel " << v;
}

TEST(BatchRun, TheCtCacheBudgetHoldsDuringARun) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  protondose::CtImage ct2 = batch_test::tiny_ct();
  protondose::dicom::write_ct_series(ct2, (dir / "ct2").string());
  const std::size_t one_ct = pe::ct_image_bytes(protondose::dicom::read_ct_series((dir / "ct").string()));
  auto o = batch_test::fast_options(dir);
  o.ct_cache_bytes = one_ct + one_ct / 2;  // room for one CT
  const pe::Manifest m = manifest_of(dir, {c.job("a"), c.job("b", "plan100.txt", "ct2"), c.job("c"), c.job("d")});
  const pe::BatchSummary s = pe::run_batch(m, o, batch_test::test_io());
  EXPECT_EQ(s.ok, 4u);
  EXPECT_LE(s.ct_peak_bytes, o.ct_cache_bytes);
  EXPECT_EQ(s.ct_peak_bytes, one_ct);
  EXPECT_EQ(s.ct_loads, 3u);  // ct, ct2 (evicts ct), ct again; d hits
  EXPECT_EQ(s.ct_evictions, 2u);
}

TEST(BatchRun, AReferenceDoseGivesGammaAndFlagsMarkTheJob) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  auto o = batch_test::fast_options(dir);
  ASSERT_EQ(pe::run_batch(manifest_of(dir, {c.job("planned")}), o, batch_test::test_io()).ok, 1u);
  fs::copy_file(c.job("planned").out_path, dir / "planned_reference.dcm");

  pe::BatchJob same = c.job("same");
  same.reference_dose_path = (dir / "planned_reference.dcm").string();
  pe::BatchJob moved = c.job("moved");
  moved.reference_dose_path = same.reference_dose_path;
  moved.shift_mm = {8, 0, 0};
  o.flags = {pe::parse_flag_rule("gamma<95")};
  const pe::BatchSummary s = pe::run_batch(manifest_of(dir, {same, moved}), o, batch_test::test_io());
  ASSERT_EQ(s.ok, 2u);
  const auto& rs = record(s, "same");
  const auto& rm = record(s, "moved");
  ASSERT_TRUE(rs.metrics.contains("gamma")) << rs.metrics.dump();
  EXPECT_EQ(rs.metrics["gamma"]["pass_rate_percent"].get<double>(), 100.0);
  EXPECT_GT(rs.metrics["gamma"]["evaluated_voxels"].get<std::size_t>(), 20u);
  EXPECT_TRUE(rs.flags.empty());
  // An 8 mm lateral shift of a 16 mm wide field fails gamma 3 %/3 mm widely.
  EXPECT_LT(rm.metrics["gamma"]["pass_rate_percent"].get<double>(), 95.0);
  ASSERT_EQ(rm.flags.size(), 1u);
  EXPECT_EQ(rm.flags[0].rfind("gamma<95 (", 0), 0u) << rm.flags[0];
}

TEST(BatchRun, ShardRecordsMergeIntoOneSummaryWithTheFailures) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  std::vector<pe::BatchJob> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(c.job("s" + std::to_string(i)));
  jobs.push_back(c.job("broken", "plan500.txt"));
  const pe::Manifest m = manifest_of(dir, jobs);
  std::vector<std::string> files;
  std::size_t ran = 0;
  for (int k = 0; k < 3; ++k) {
    auto o = batch_test::fast_options(dir);
    o.shard = {k, 3};
    o.records_path = (dir / ("records.shard-" + std::to_string(k) + ".jsonl")).string();
    ran += pe::run_batch(m, o, batch_test::test_io()).records.size();
    files.push_back(o.records_path);
  }
  EXPECT_EQ(ran, jobs.size());  // the shards partition the jobs
  const pe::BatchSummary merged = pe::merge_records(m, files);
  EXPECT_EQ(merged.records.size(), jobs.size());
  EXPECT_EQ(merged.ok, 6u);
  EXPECT_EQ(merged.failed, 1u);
  EXPECT_EQ(merged.missing, 0u);
  EXPECT_EQ(record(merged, "broken").category, "input");

  // A shard that never ran leaves its jobs "missing".
  const pe::BatchSummary partial = pe::merge_records(m, {files[0]});
  EXPECT_GT(partial.missing, 0u);
  EXPECT_FALSE(partial.all_succeeded());
}

TEST(BatchRun, AStopRequestCancelsTheJobsNotStarted) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  std::atomic<bool> stop{false};
  auto o = batch_test::fast_options(dir);
  o.stop = &stop;
  o.on_record = [&](const pe::JobRecord&, std::size_t, std::size_t) { stop = true; };
  const pe::BatchSummary s = pe::run_batch(manifest_of(dir, {c.job("a"), c.job("b"), c.job("c"), c.job("d"), c.job("e")}),
                                           o, batch_test::test_io());
  EXPECT_GE(s.ok, 1u);
  EXPECT_GE(s.cancelled, 1u);
  EXPECT_EQ(s.ok + s.cancelled, 5u);
  for (const auto& r : s.records)
    if (r.status == "cancelled") {
      EXPECT_FALSE(fs::exists(r.out_path)) << r.id;
    }
}

TEST(BatchRun, AnUnwritableRecordsFileOrBadOptionsFailBeforeAnyJob) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  const pe::Manifest m = manifest_of(dir, {c.job("a")});
  auto o = batch_test::fast_options(dir);
  o.records_path = (dir / "no_such_folder" / "records.jsonl").string();
  const std::string msg =
      protondose::testing::message_of<protondose::IoError>([&] { pe::run_batch(m, o, batch_test::test_io()); });
  EXPECT_NE(msg.find("cannot open the records file '" + o.records_path + "'"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(c.job("a").out_path));

  auto bad = batch_test::fast_options(dir);
  bad.workers = 0;
  EXPECT_NE(protondose::testing::message_of<protondose::ConfigError>([&] { pe::run_batch(m, bad, batch_test::test_io()); })
                .find("--workers 0: need at least 1"),
            std::string::npos);
  bad = batch_test::fast_options(dir);
  bad.writers = 0;
  EXPECT_NE(protondose::testing::message_of<protondose::ConfigError>([&] { pe::run_batch(m, bad, batch_test::test_io()); })
                .find("--writers 0: need at least 1"),
            std::string::npos);
  bad = batch_test::fast_options(dir);
  bad.default_backend = "fpga";
  EXPECT_NE(protondose::testing::message_of<protondose::ConfigError>([&] { pe::run_batch(m, bad, batch_test::test_io()); })
                .find("fpga"),
            std::string::npos);
}

TEST(BatchRun, OutOfMemoryAndUnexpectedExceptionsAreRecordedNotFatal) {
  const auto dir = batch_test::fresh_dir();
  const TinyCase c(dir);
  pe::BatchIo io = batch_test::test_io();
  const auto real_read_ct = io.read_ct;
  io.read_ct = [real_read_ct](const std::string& ct_dir) -> protondose::CtImage {
    if (ct_dir.find("badct") != std::string::npos) throw std::bad_alloc();
    return real_read_ct(ct_dir);
  };
  io.read_plan = [](const pe::BatchJob& job, protondose::CtImage& ct) -> protondose::IonPlan {
    if (job.id == "surprise") throw std::runtime_error("an exception outside the protondose family");
    return batch_test::test_io().read_plan(job, ct);
  };
  const pe::Manifest m =
      manifest_of(dir, {c.job("oom", "plan100.txt", "badct"), c.job("surprise"), c.job("fine")});
  const pe::BatchSummary s = pe::run_batch(m, batch_test::fast_options(dir), io);
  EXPECT_EQ(record(s, "oom").category, "memory");
  EXPECT_EQ(record(s, "oom").message.rfind("out of memory: ", 0), 0u) << record(s, "oom").message;
  EXPECT_EQ(record(s, "surprise").category, "internal");
  EXPECT_EQ(record(s, "surprise").message, "an exception outside the protondose family");
  EXPECT_EQ(record(s, "fine").status, "ok");
}
