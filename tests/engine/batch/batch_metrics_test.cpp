// DVH metrics per structure and their change from the reference, as a batch
// record carries them, and the flag rules that read them.
#include <gtest/gtest.h>

#include "batch_case.h"
#include "expect_error.h"
#include "protondose/dicom/rt_struct.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/batch_dicom_io.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"

namespace pe = protondose::engine;

namespace {

/// A structure set with "PTV" (a 16 x 24 mm box in the entrance plateau of the
/// gantry-0 field, which runs along +y from y = -60 mm to its peak near +17 mm, on every
/// slice of the grid within ±12 mm of z = 0) and "Empty" (far outside the CT).
protondose::dicom::StructureSet box_structures(const protondose::Grid3& g) {
  protondose::dicom::StructureSet set;
  set.frame_of_reference_uid = batch_test::kFrameUid;
  protondose::dicom::Roi ptv{1, "PTV", batch_test::kFrameUid, "PTV", {}};
  protondose::dicom::Roi empty{2, "Empty", batch_test::kFrameUid, "", {}};
  for (int k = 0; k < g.size[2]; ++k) {
    const double z = g.position_mm(0, 0, k)[2];
    if (std::abs(z) > 12) continue;
    ptv.contours.push_back({{{-8, -30, z}, {8, -30, z}, {8, -6, z}, {-8, -6, z}}});
    empty.contours.push_back({{{900, 900, z}, {910, 900, z}, {910, 910, z}}});
  }
  set.rois = {ptv, empty};
  return set;
}

}  // namespace

TEST(BatchMetrics, StructureMetricsGiveTheDvhAndItsChangeFromTheReference) {
  pe::DoseEngineOptions o;
  o.ray_pitch_mm = 2;
  o.depth_step_mm = 2;
  o.threads = 2;
  const pe::DoseEngine engine(protondose::physics::load_machine("DCPT_ProBeam_v5"),
                              protondose::physics::default_hu_curve(), o);
  const protondose::Volume<float> dose = engine.compute(batch_test::tiny_ct(), batch_test::tiny_plan(100)).dose_gy;
  protondose::Volume<float> reference = dose;
  for (float& v : reference.data) v *= 1.05f;  // the plan gave 5 % more

  const auto set = box_structures(dose.grid);
  const nlohmann::json m = pe::dicom_io::structure_metrics(set, dose, &reference);
  ASSERT_TRUE(m["structures"].contains("PTV")) << m.dump(1);
  const nlohmann::json& ptv = m["structures"]["PTV"];
  const double d95 = ptv["d95_gy"].get<double>();
  ASSERT_GT(d95, 0.0);
  EXPECT_LE(ptv["d98_gy"].get<double>(), d95);
  EXPECT_LE(d95, ptv["d50_gy"].get<double>());
  EXPECT_LE(ptv["d50_gy"].get<double>(), ptv["d2_gy"].get<double>());
  EXPECT_NEAR(ptv["reference"]["d95_gy"].get<double>(), 1.05 * d95, 1e-6 * d95);
  EXPECT_NEAR(ptv["change_percent"]["d95_gy"].get<double>(), 100.0 * (1 / 1.05 - 1), 1e-3);
  EXPECT_NEAR(ptv["change_gy"]["mean_gy"].get<double>(), -0.05 * ptv["reference"]["mean_gy"].get<double>() / 1.05,
              1e-6);
  // An ROI with no voxel on the grid is reported, not fatal.
  ASSERT_TRUE(m["structures_skipped"].contains("Empty"));
  EXPECT_NE(m["structures_skipped"]["Empty"].get<std::string>().find("Empty"), std::string::npos);

  // -4.8 % fires "D95 < -3 %", not "< -5 %"; an absolute rule reads the dose itself.
  nlohmann::json record_metrics = {{"structures", m["structures"]}};
  const auto fired = pe::evaluate_flags(
      {pe::parse_flag_rule("PTV:D95<-3%"), pe::parse_flag_rule("PTV:D95<-5%"), pe::parse_flag_rule("PTV:max>1000")},
      record_metrics);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].rfind("PTV:D95<-3% (-4.76", 0), 0u) << fired[0];
}

TEST(BatchMetrics, DvhEnvelopeIsThePointwiseMinimumAndMaximumOverScenarios) {
  protondose::compare::Dvh a, b;
  a.roi_name = b.roi_name = "PTV";
  a.cumulative = {{0.0, 100}, {0.5, 80}, {1.0, 10}};
  a.max_gy = 1.2;
  b.cumulative = {{0.0, 100}, {0.5, 90}, {1.0, 5}, {1.5, 2}};
  b.max_gy = 1.6;
  const auto [lo, hi] = pe::dicom_io::dvh_envelope({a, b});
  EXPECT_EQ(lo.roi_name, "PTV min");
  EXPECT_EQ(hi.roi_name, "PTV max");
  ASSERT_EQ(lo.cumulative.size(), 4u);
  EXPECT_EQ(lo.cumulative[1].volume_percent, 80);
  EXPECT_EQ(hi.cumulative[1].volume_percent, 90);
  EXPECT_EQ(lo.cumulative[2].volume_percent, 5);
  EXPECT_EQ(hi.cumulative[2].volume_percent, 10);
  EXPECT_EQ(lo.cumulative[3].volume_percent, 0);  // a beyond its end
  EXPECT_EQ(hi.cumulative[3].volume_percent, 2);
  EXPECT_EQ(hi.cumulative[3].dose_gy, 1.5);
  b.cumulative[1].dose_gy = 0.6;
  const std::string msg = protondose::testing::message_of<protondose::InternalError>([&] { pe::dicom_io::dvh_envelope({a, b}); });
  EXPECT_NE(msg.find("DVH envelope of 'PTV': scenarios have different bin widths"), std::string::npos) << msg;
}
