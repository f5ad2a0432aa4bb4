// Pieces of the batch runner that need no dose: checksums, shards, the CT
// cache, flag rules, GPU lists, scenarios, the Slurm script.
#include "protondose/engine/batch.h"

#include <gtest/gtest.h>

#include <set>

#include "batch_case.h"
#include "expect_error.h"
#include "protondose/core/error.h"
#include "protondose/physics/hu_curve.h"

namespace pe = protondose::engine;
using protondose::testing::message_of;

TEST(BatchChecksum, Fnv1a64MatchesThePublishedTestVectors) {
  EXPECT_EQ(pe::fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(pe::fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(pe::fnv1a64("foobar", 6), 0x85944171f73967e8ull);
  EXPECT_EQ(pe::hex64(0xaf63dc4c8601ec8cull), "af63dc4c8601ec8c");
}

TEST(BatchChecksum, AFolderHashChangesWhenAnyFileChangesOrIsRenamed) {
  const auto dir = batch_test::fresh_dir();
  batch_test::write_text(dir / "a", "one");
  batch_test::write_text(dir / "b", "two");
  const auto h0 = pe::hash_path(dir.string());
  EXPECT_EQ(pe::hash_path(dir.string()), h0);
  batch_test::write_text(dir / "b", "twO");
  const auto h1 = pe::hash_path(dir.string());
  EXPECT_NE(h1, h0);
  std::filesystem::rename(dir / "b", dir / "c");
  EXPECT_NE(pe::hash_path(dir.string()), h1);
  EXPECT_NE(message_of<protondose::IoError>([&] { pe::hash_path((dir / "none").string()); }).find("none"),
            std::string::npos);
}

TEST(BatchShard, ShardsPartitionTheJobsExactlyAndDependOnTheIdOnly) {
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) ids.push_back("patient" + std::to_string(i % 37) + "/fraction" + std::to_string(i));
  for (int n : {1, 2, 3, 4, 7}) {
    std::vector<int> hits(ids.size(), 0);
    std::vector<int> per_shard(static_cast<std::size_t>(n), 0);
    for (int k = 0; k < n; ++k)
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (pe::job_in_shard(ids[i], pe::ShardSpec{k, n})) {
          ++hits[i];
          ++per_shard[static_cast<std::size_t>(k)];
        }
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(hits[i], 1) << ids[i] << " with N = " << n;
    // Not degenerate: every shard gets work (200 jobs, at most 7 shards).
    for (int k = 0; k < n; ++k) EXPECT_GT(per_shard[static_cast<std::size_t>(k)], 10) << "shard " << k << "/" << n;
  }
  // The hash is of the id: fixed across runs and machines.
  EXPECT_EQ(pe::fnv1a64("patient1/fraction1", 18) % 4, pe::fnv1a64(std::string("patient1/fraction1").data(), 18) % 4);
}

TEST(BatchShard, ParsesKOverNAndRejectsTheRest) {
  const pe::ShardSpec s = pe::parse_shard("3/4");
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.count, 4);
  for (const char* bad : {"4/4", "-1/4", "1", "1/0", "a/b", "1/4x"}) {
    const std::string msg = message_of<protondose::ConfigError>([&] { pe::parse_shard(bad); });
    EXPECT_NE(msg.find(std::string("--shard '") + bad + "'"), std::string::npos) << msg;
  }
}

TEST(BatchCtCache, KeepsAtMostItsBudgetAndEvictsTheLeastRecentlyUsed) {
  // CTs of 1000 floats (4000 bytes) each; a budget of 2.5 CTs holds two.
  std::vector<std::string> loaded;
  pe::CtCache cache(10000, [&](const std::string& dir) {
    loaded.push_back(dir);
    protondose::CtImage ct;
    protondose::Grid3 g;
    g.size = {10, 10, 10};
    ct.hu = protondose::Volume<float>(g, 0.0f);
    return ct;
  });
  std::size_t peak = 0;
  for (const char* dir : {"A", "B", "A", "C", "A", "B", "B", "D"}) {
    const auto ct = cache.get(dir);
    ASSERT_EQ(ct->hu.data.size(), 1000u);
    ASSERT_LE(cache.cached_bytes(), cache.budget_bytes());
    peak = std::max(peak, cache.cached_bytes());
  }
  // A, B (load) A (hit) C (load, evicts B) A (hit) B (load, evicts C) B (hit) D (load, evicts A).
  EXPECT_EQ(loaded, (std::vector<std::string>{"A", "B", "C", "B", "D"}));
  EXPECT_EQ(cache.loads(), 5u);
  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.evictions(), 3u);
  EXPECT_EQ(cache.peak_cached_bytes(), 8000u);
  EXPECT_EQ(peak, 8000u);
}

TEST(BatchCtCache, ACtLargerThanTheBudgetIsReturnedButNotKept) {
  int loads = 0;
  pe::CtCache cache(100, [&](const std::string&) {
    ++loads;
    protondose::CtImage ct;
    protondose::Grid3 g;
    g.size = {10, 10, 1};
    ct.hu = protondose::Volume<float>(g, 5.0f);
    return ct;
  });
  EXPECT_EQ(cache.get("big")->hu.data[0], 5.0f);
  EXPECT_EQ(cache.get("big")->hu.data[0], 5.0f);
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

TEST(BatchFlags, ParsesTheRuleFormsAndFiresOnTheMetrics) {
  const pe::FlagRule r = pe::parse_flag_rule("PTV:D95<-3%");
  EXPECT_EQ(r.structure, "PTV");
  EXPECT_EQ(r.metric, "d95");
  EXPECT_TRUE(r.less);
  EXPECT_EQ(r.threshold, -3.0);
  EXPECT_EQ(r.kind, pe::FlagRule::Kind::kChangePercent);
  EXPECT_EQ(pe::parse_flag_rule("Cord:max>45").kind, pe::FlagRule::Kind::kAbsoluteGy);
  EXPECT_EQ(pe::parse_flag_rule("PTV:D2>1Gy").kind, pe::FlagRule::Kind::kChangeGy);
  EXPECT_EQ(pe::parse_flag_rule("gamma<95").kind, pe::FlagRule::Kind::kGammaPassRate);

  const nlohmann::json metrics = {
      {"gamma", {{"pass_rate_percent", 91.0}}},
      {"structures",
       {{"PTV", {{"d95_gy", 1.90}, {"d2_gy", 2.2}, {"reference", {{"d95_gy", 2.0}, {"d2_gy", 2.1}}}}},
        {"Cord", {{"max_gy", 40.0}}}}}};
  const std::vector<pe::FlagRule> rules{pe::parse_flag_rule("PTV:D95<-3%"),  // -5 %: fires
                                        pe::parse_flag_rule("PTV:D2>0.5Gy"), // +0.1 Gy: quiet
                                        pe::parse_flag_rule("Cord:max>45"),  // 40 Gy: quiet
                                        pe::parse_flag_rule("gamma<95"),     // 91 %: fires
                                        pe::parse_flag_rule("Rectum:mean>30")};
  const auto fired = pe::evaluate_flags(rules, metrics);
  ASSERT_EQ(fired.size(), 3u);
  EXPECT_EQ(fired[0], "PTV:D95<-3% (-5)");
  EXPECT_EQ(fired[1], "gamma<95 (91)");
  EXPECT_EQ(fired[2], "Rectum:mean>30: not evaluable");
}

TEST(BatchFlags, RejectsMalformedRules) {
  for (const char* bad : {"PTV:D95", "PTV:D96<3", "D95<3", "PTV:D95<x%", "gamma<95%"}) {
    const std::string msg = message_of<protondose::ConfigError>([&] { pe::parse_flag_rule(bad); });
    EXPECT_NE(msg.find(std::string("--flag '") + bad + "'"), std::string::npos) << msg;
  }
}

TEST(BatchGpuPlacement, WorkersOnADeviceCountTheWorkersThatShareItsMemory) {
  // Worker w on gpu_devices[w mod size]: 5 workers on {0, 1} → 3 on 0, 2 on 1.
  EXPECT_EQ(pe::workers_on_device({0, 1}, 5, 0), 3);
  EXPECT_EQ(pe::workers_on_device({0, 1}, 5, 1), 2);
  EXPECT_EQ(pe::workers_on_device({1}, 2, 1), 2);
  EXPECT_EQ(pe::workers_on_device({1}, 2, 0), 0);
  // No list: every worker on device 0.
  EXPECT_EQ(pe::workers_on_device({}, 3, 0), 3);
  EXPECT_EQ(pe::workers_on_device({}, 3, 1), 0);
}

TEST(BatchGpus, DevicesThatDoNotExistAreAClearError) {
  std::string msg = message_of<protondose::UnavailableError>([] { pe::parse_gpu_list("0", 0); });
  EXPECT_NE(msg.find("--gpus '0': device 0 does not exist (0 usable CUDA device(s) here, or built without CUDA)"),
            std::string::npos)
      << msg;
  msg = message_of<protondose::UnavailableError>([] { pe::parse_gpu_list("all", 0); });
  EXPECT_NE(msg.find("no usable CUDA device"), std::string::npos) << msg;
  msg = message_of<protondose::UnavailableError>([] { pe::parse_gpu_list("0,2", 2); });
  EXPECT_NE(msg.find("device 2 does not exist (2 usable"), std::string::npos) << msg;
  EXPECT_EQ(pe::parse_gpu_list("all", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pe::parse_gpu_list("1,0", 2), (std::vector<int>{1, 0}));
  EXPECT_NE(message_of<protondose::ConfigError>([] { pe::parse_gpu_list("0,0", 2); }).find("listed twice"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::ConfigError>([] { pe::parse_gpu_list("gpu0", 2); }).find("expected 'all'"),
            std::string::npos);
}

TEST(BatchScenario, ShiftMovesEveryIsocentreByMinusTheShift) {
  protondose::IonPlan plan = batch_test::tiny_plan(100);
  plan.beams.push_back(plan.beams[0]);
  plan.beams[1].isocenter_mm = {10, 20, 30};
  const protondose::IonPlan s = pe::shifted_plan(plan, {1, -2, 3});
  EXPECT_EQ(s.beams[0].isocenter_mm, (protondose::Vec3{-1, 2, -3}));
  EXPECT_EQ(s.beams[1].isocenter_mm, (protondose::Vec3{9, 22, 27}));
}

TEST(BatchScenario, RspScaleMultipliesTheCurvesRspOnly) {
  const protondose::physics::HuCurve base = protondose::physics::default_hu_curve();
  const protondose::physics::HuCurve up = pe::scaled_hu_curve(base, 1.035);
  ASSERT_EQ(up.points().size(), base.points().size());
  for (std::size_t i = 0; i < base.points().size(); ++i) {
    EXPECT_DOUBLE_EQ(up.points()[i].rsp, 1.035 * base.points()[i].rsp);
    EXPECT_EQ(up.points()[i].mass_density_g_cm3, base.points()[i].mass_density_g_cm3);
  }
  EXPECT_NE(up.source().find("RSP x 1.035"), std::string::npos);
  EXPECT_NE(message_of<protondose::ConfigError>([&] { pe::scaled_hu_curve(base, 0); }).find("rsp_scale 0"),
            std::string::npos);
}

TEST(BatchScenario, PlanMachineNameRequiresAgreement) {
  protondose::IonPlan plan = batch_test::tiny_plan(100);
  EXPECT_EQ(pe::plan_machine_name(plan, "p.dcm"), "DCPT_ProBeam_v5");
  plan.beams.push_back(plan.beams[0]);
  plan.beams[1].machine_name = "Other";
  EXPECT_NE(message_of<protondose::ConfigError>([&] { pe::plan_machine_name(plan, "p.dcm"); })
                .find("p.dcm: beams name different machines ('DCPT_ProBeam_v5', 'Other')"),
            std::string::npos);
}

TEST(BatchSlurm, ScriptIsAJobArrayOverTheShards) {
  const std::string s = pe::slurm_array_script("/opt/protondose", "/data/m.json", 4, 1, "/data/report", "--workers 1");
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_NE(s.find("#SBATCH --array=0-3\n"), std::string::npos) << s;
  EXPECT_NE(s.find("#SBATCH --gpus-per-task=1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("--shard \"${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}\" --workers 1"), std::string::npos) << s;
  EXPECT_NE(s.find("'/opt/protondose' batch '/data/m.json' --report-dir '/data/report'"), std::string::npos) << s;
  EXPECT_EQ(pe::slurm_array_script("p", "m", 2, 0, "r", "").find("gpus-per-task"), std::string::npos);
  EXPECT_NE(message_of<protondose::ConfigError>([] { pe::slurm_array_script("p", "m", 0, 0, "r", ""); })
                .find("--array-size 0"),
            std::string::npos);
}

TEST(BatchRecords, RoundTripThroughJson) {
  pe::JobRecord r;
  r.id = "x";
  r.status = "failed";
  r.category = "input";
  r.message = "bad";
  r.read_s = 1;
  r.compute_s = 2;
  r.flags = {"f"};
  r.metrics = {{"gamma", {{"pass_rate_percent", 99.0}}}};
  const pe::JobRecord back = pe::job_record_from_json(pe::to_json(r));
  EXPECT_EQ(pe::to_json(back), pe::to_json(r));
}
