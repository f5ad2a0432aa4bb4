#include "protondose/engine/manifest.h"

#include <gtest/gtest.h>

#include "batch_case.h"
#include "expect_error.h"
#include "protondose/core/error.h"

namespace pe = protondose::engine;
using protondose::testing::message_of;

namespace {

const char* kGood = R"({
  "defaults": {"ct": "ct", "grid_mm": 4},
  "jobs": [
    {"id": "a", "plan": "plan100.txt", "out": "out/a.dcm"},
    {"id": "b", "plan": "plan100.txt", "out": "out/b.dcm", "shift_mm": [1, -2, 3.5], "rsp_scale": 1.035,
     "backend": "cpu", "ct": "/abs/ct"}
  ]})";

}  // namespace

TEST(Manifest, JsonResolvesRelativePathsAgainstTheManifestFolderAndAppliesDefaults) {
  const pe::Manifest m = pe::parse_manifest_json(kGood, "m.json", "/data/case");
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[0].ct_dir, "/data/case/ct");
  EXPECT_EQ(m.jobs[0].plan_path, "/data/case/plan100.txt");
  EXPECT_EQ(m.jobs[0].out_path, "/data/case/out/a.dcm");
  ASSERT_TRUE(m.jobs[0].grid_mm.has_value());
  EXPECT_EQ(*m.jobs[0].grid_mm, 4.0);
  EXPECT_EQ(m.jobs[0].rsp_scale, 1.0);
  EXPECT_EQ(m.jobs[1].ct_dir, "/abs/ct");  // a job's own value beats the default
  EXPECT_EQ(m.jobs[1].shift_mm, (protondose::Vec3{1, -2, 3.5}));
  EXPECT_EQ(m.jobs[1].rsp_scale, 1.035);
  EXPECT_EQ(m.jobs[1].backend, "cpu");
  EXPECT_EQ(m.jobs[1].position, 2);
}

TEST(Manifest, RejectsAnUnknownKeyNamingTheJobAndKey) {
  const std::string msg = message_of<protondose::InputError>([] {
    pe::parse_manifest_json(R"([{"id": "j1", "ct": "c", "plan": "p", "out": "o", "shfit_mm": [0,0,0]}])", "m.json", "/x");
  });
  EXPECT_NE(msg.find("m.json, job 1 (id 'j1')"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'shfit_mm'"), std::string::npos) << msg;
}

TEST(Manifest, RejectsABadTypeNamingKeyAndValue) {
  const std::string msg = message_of<protondose::InputError>([] {
    pe::parse_manifest_json(R"([{"id": "j1", "ct": "c", "plan": "p", "out": "o", "shift_mm": [0, 1]}])", "m.json", "/x");
  });
  EXPECT_NE(msg.find("'shift_mm' must be an array of 3 numbers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[0,1]"), std::string::npos) << msg;
  const std::string msg2 = message_of<protondose::InputError>([] {
    pe::parse_manifest_json(R"([{"id": "j1", "ct": "c", "plan": "p", "out": "o", "rsp_scale": "1.03"}])", "m.json", "/x");
  });
  EXPECT_NE(msg2.find("key 'rsp_scale' must be a number, got \"1.03\""), std::string::npos) << msg2;
}

TEST(Manifest, RejectsOutOfRangeValuesAndUnknownBackends) {
  EXPECT_NE(message_of<protondose::InputError>([] {
              pe::parse_manifest_json(R"([{"id":"j","ct":"c","plan":"p","out":"o","rsp_scale":0}])", "m.json", "/x");
            }).find("accepted range [0.5, 2]"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::InputError>([] {
              pe::parse_manifest_json(R"([{"id":"j","ct":"c","plan":"p","out":"o","backend":"fast"}])", "m.json", "/x");
            }).find("'backend' is 'fast'; accepted: cpu, gpu, gpu-gather"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::InputError>([] {
              pe::parse_manifest_json(R"([{"id":"j","ct":"c","plan":"p","out":"o","grid_mm":-1}])", "m.json", "/x");
            }).find("'grid_mm' is -1 mm"),
            std::string::npos);
}

TEST(Manifest, RejectsAMissingRequiredKey) {
  const std::string msg = message_of<protondose::InputError>(
      [] { pe::parse_manifest_json(R"({"jobs": [{"id": "j1", "ct": "c", "out": "o"}]})", "m.json", "/x"); });
  EXPECT_NE(msg.find("job 1 (id 'j1'): required key 'plan' is missing"), std::string::npos) << msg;
}

TEST(Manifest, RejectsMalformedJsonAndUnknownTopLevelKeys) {
  EXPECT_NE(message_of<protondose::InputError>([] { pe::parse_manifest_json("{", "m.json", "/x"); })
                .find("m.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::InputError>([] { pe::parse_manifest_json(R"({"jobs": [], "job": 1})", "m.json", "/x"); })
                .find("unknown top-level key 'job'"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::InputError>([] { pe::parse_manifest_json(R"({"jobs": []})", "m.json", "/x"); })
                .find("has no jobs"),
            std::string::npos);
}

TEST(Manifest, CsvWithHeaderQuotesAndShiftTriples) {
  const pe::Manifest m = pe::parse_manifest_csv(
      "# adaptive fractions\nid,ct,plan,out,shift_mm,rsp_scale\n"
      "f1,ct,plan100.txt,out/f1.dcm,1;2;3,\n"
      "\"f,2\",ct,plan100.txt,out/f2.dcm,,0.965\n",
      "m.csv", "/d");
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[0].shift_mm, (protondose::Vec3{1, 2, 3}));
  EXPECT_EQ(m.jobs[0].rsp_scale, 1.0);
  EXPECT_EQ(m.jobs[1].id, "f,2");
  EXPECT_EQ(m.jobs[1].rsp_scale, 0.965);
  EXPECT_EQ(m.jobs[1].out_path, "/d/out/f2.dcm");
  EXPECT_EQ(m.jobs[1].position, 4);  // the CSV line
}

TEST(Manifest, CsvRejectsUnknownColumnsAndBadNumbersNamingTheLine) {
  EXPECT_NE(message_of<protondose::InputError>([] { pe::parse_manifest_csv("id,ct,plan,out,dose\n", "m.csv", "/d"); })
                .find("m.csv, line 1: unknown column 'dose'"),
            std::string::npos);
  const std::string msg = message_of<protondose::InputError>(
      [] { pe::parse_manifest_csv("id,ct,plan,out,rsp_scale\nj,c,p,o,1.0x\n", "m.csv", "/d"); });
  EXPECT_NE(msg.find("m.csv, line 2 (id 'j'): key 'rsp_scale' must be a number, got '1.0x'"), std::string::npos) << msg;
}

TEST(Manifest, ValidationListsEveryProblemWithJobAndKey) {
  const auto dir = batch_test::fresh_dir();
  const batch_test::TinyCase c(dir);
  batch_test::write_text(dir / "m.json", R"([
    {"id": "a", "ct": "ct", "plan": "plan100.txt", "out": "out/a.dcm"},
    {"id": "a", "ct": "nope", "plan": "plan100.txt", "out": "out/b.dcm"},
    {"id": "c", "ct": "ct", "plan": "missing.txt", "out": "out/a.dcm"},
    {"id": "d", "ct": "ct", "plan": "plan100.txt", "out": "nofolder/d.dcm"}
  ])");
  const std::string msg = message_of<protondose::InputError>([&] { pe::load_manifest((dir / "m.json").string()); });
  EXPECT_NE(msg.find("5 problem(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("job 'a' (2): key 'id': duplicate of job 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("job 'a' (2): key 'ct': no such folder"), std::string::npos) << msg;
  EXPECT_NE(msg.find("job 'c' (3): key 'plan': no such file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("job 'c' (3): key 'out': '" + (dir / "out/a.dcm").string() + "' is also the output of job 'a'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("job 'd' (4): key 'out': the folder"), std::string::npos) << msg;
}

TEST(Manifest, RejectsAnOutputThatIsAnInputOfTheBatch) {
  const auto dir = batch_test::fresh_dir();
  const batch_test::TinyCase c(dir);
  batch_test::write_text(dir / "m.json", R"([{"id": "a", "ct": "ct", "plan": "plan100.txt", "out": "plan100.txt"}])");
  const std::string msg = message_of<protondose::InputError>([&] { pe::load_manifest((dir / "m.json").string()); });
  EXPECT_NE(msg.find("key 'out':"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is an input of the batch"), std::string::npos) << msg;
}

TEST(Manifest, ARegistrationIsAnInputFileResolvedAndCheckedLikeTheOthers) {
  const auto dir = batch_test::fresh_dir();
  const batch_test::TinyCase c(dir);
  batch_test::write_text(dir / "reg.dcm", "x");  // its contents are read when the job runs
  batch_test::write_text(dir / "m.json",
                         R"([{"id": "a", "ct": "ct", "plan": "plan100.txt", "out": "out/a.dcm", "registration": "reg.dcm"}])");
  const pe::Manifest m = pe::load_manifest((dir / "m.json").string());
  ASSERT_EQ(m.jobs.size(), 1u);
  EXPECT_EQ(m.jobs[0].registration_path, (dir / "reg.dcm").lexically_normal().string());
  batch_test::write_text(dir / "missing.csv", "id,ct,plan,out,registration\na,ct,plan100.txt,out/a.dcm,none.dcm\n");
  std::string msg = message_of<protondose::InputError>([&] { pe::load_manifest((dir / "missing.csv").string()); });
  EXPECT_NE(msg.find("job 'a' (2): key 'registration': no such file '" + (dir / "none.dcm").string() + "'"),
            std::string::npos)
      << msg;
  // Writing a job's output over another job's registration would corrupt it.
  batch_test::write_text(dir / "clobber.json",
                         R"([{"id": "a", "ct": "ct", "plan": "plan100.txt", "out": "out/a.dcm", "registration": "reg.dcm"},
                             {"id": "b", "ct": "ct", "plan": "plan100.txt", "out": "reg.dcm"}])");
  msg = message_of<protondose::InputError>([&] { pe::load_manifest((dir / "clobber.json").string()); });
  EXPECT_NE(msg.find("job 'b' (2): key 'out':"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is an input of the batch"), std::string::npos) << msg;
}

TEST(Manifest, RejectsAnUnknownExtension) {
  const auto dir = batch_test::fresh_dir();
  batch_test::write_text(dir / "m.yaml", "jobs: []");
  EXPECT_NE(message_of<protondose::InputError>([&] { pe::load_manifest((dir / "m.yaml").string()); })
                .find("a manifest must be .json or .csv, got '.yaml'"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::IoError>([&] { pe::load_manifest((dir / "none.json").string()); })
                .find("cannot open the manifest"),
            std::string::npos);
}
