// inspect_path() on the shared cases: the keys of docs/formats/inspect-json.md
// and values checked against the readers' independently checked numbers.
#include <gtest/gtest.h>

#include <fstream>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/inspect.h"

namespace protondose::dicom {
namespace {

using test::shared;

const nlohmann::json* find_kind(const nlohmann::json& summary, const std::string& kind) {
  for (const auto& o : summary.at("objects"))
    if (o.at("kind") == kind) return &o;
  return nullptr;
}

TEST(Inspect, SummarisesTheSlabCaseFolder) {
  const auto summary = inspect_path(shared("reference/slab_dcpt"));
  if (::testing::Test::HasFailure()) return;
  const auto* ct = find_kind(summary, "ct_series");
  ASSERT_NE(ct, nullptr) << summary.dump(2);
  EXPECT_FALSE(ct->contains("error")) << ct->dump(2);
  EXPECT_EQ((*ct)["files"], 110);
  EXPECT_EQ((*ct)["grid"]["size"], nlohmann::json({110, 135, 110}));
  EXPECT_EQ((*ct)["grid"]["spacing_mm"], nlohmann::json({2.0, 2.0, 2.0}));
  EXPECT_EQ((*ct)["grid"]["origin_mm"], nlohmann::json({-109.0, -119.0, -109.0}));
  EXPECT_EQ((*ct)["patient_position"], "HFS");
  EXPECT_EQ((*ct)["hu_min"], -1000.0);
  EXPECT_EQ((*ct)["hu_max"], 1300.0);

  const auto* plan = find_kind(summary, "ion_plan");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ((*plan)["fractions"], 1);
  EXPECT_EQ((*plan)["computable"], true);
  EXPECT_EQ((*plan)["spots"], 242);
  EXPECT_NEAR((*plan)["meterset_per_fraction"]["MU"].get<double>(), 484.0, 1e-9);
  const auto& beam = (*plan)["beams"][0];
  EXPECT_EQ(beam["name"], "G000");
  EXPECT_EQ(beam["machine"], "DCPT_ProBeam_v5");
  EXPECT_EQ(beam["layers"], 2);
  EXPECT_EQ(beam["energy_min_mev"], 120.0);
  EXPECT_EQ(beam["energy_max_mev"], 150.0);
  EXPECT_EQ(beam["vsad_mm"], nlohmann::json({2000.0, 2560.0}));
  EXPECT_EQ(beam["isocenter_mm"], nlohmann::json({0.0, 0.0, 0.0}));

  const auto* dose = find_kind(summary, "rt_dose");
  ASSERT_NE(dose, nullptr);
  EXPECT_EQ((*dose)["units"], "GY");
  EXPECT_EQ((*dose)["summation_type"], "PLAN");
  EXPECT_NEAR((*dose)["max"].get<double>(), 0.1499, 1e-4);  // README: max dose 0.1499 Gy

  const auto* rois = find_kind(summary, "rt_struct");
  ASSERT_NE(rois, nullptr);
  EXPECT_EQ((*rois)["rois"].size(), 3u);

  const std::string text = format_inspect_text(summary);
  EXPECT_NE(text.find("DCPT_ProBeam_v5"), std::string::npos);
  EXPECT_NE(text.find("484.00 MU per fraction"), std::string::npos) << text;
  EXPECT_NE(text.find("110 x 135 x 110"), std::string::npos);
}

TEST(Inspect, MarksThePlanWithAnApertureAsNotComputableAndSaysWhy) {
  const auto summary = inspect_path(shared("data/ion-plans/topas-demo/rtip_demo.dcm"));
  const auto* plan = find_kind(summary, "ion_plan");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ((*plan)["computable"], false);
  ASSERT_EQ((*plan)["warnings"].size(), 2u);
  EXPECT_NE((*plan)["warnings"][0].get<std::string>().find("aperture"), std::string::npos);
  EXPECT_EQ((*plan)["beams"][0]["meterset_unit"], "NP");
  EXPECT_EQ((*plan)["beams"][0]["spots"], 246);
}

TEST(Inspect, ReportsABadFileInsideTheObjectInsteadOfThrowing) {
  const std::string dir = test::scratch_dir();
  std::filesystem::copy_file(shared("reference/water_dcpt/plan.dcm"), dir + "/good.dcm");
  std::filesystem::copy_file(shared("reference/water_dcpt/plan.dcm"), dir + "/bad.dcm");
  std::filesystem::resize_file(dir + "/bad.dcm", 2000);
  std::ofstream(dir + "/readme.txt") << "notes";
  const auto summary = inspect_path(dir);
  ASSERT_EQ(summary["objects"].size(), 2u) << summary.dump(2);
  EXPECT_EQ(summary["skipped_non_dicom_files"], 1);
  EXPECT_EQ(summary["objects"][0]["kind"], "unreadable");
  EXPECT_EQ(summary["objects"][0]["error"]["category"], "input");
  EXPECT_EQ(summary["objects"][1]["kind"], "ion_plan");
  EXPECT_FALSE(summary["objects"][1].contains("error"));
}

TEST(Inspect, RejectsAMissingPath) {
  EXPECT_THROW_WITH(inspect_path("/nonexistent/case"), IoError, "/nonexistent/case");
}

TEST(Inspect, RejectsAFolderWithoutDicom) {
  const std::string dir = test::scratch_dir();
  std::ofstream(dir + "/readme.txt") << "notes";
  EXPECT_THROW_WITH(inspect_path(dir), InputError, "holds no DICOM objects", "1 non-DICOM file");
}

}  // namespace
}  // namespace protondose::dicom
