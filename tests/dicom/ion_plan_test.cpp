// RT Ion Plan reader on every shared plan. Expected numbers were read
// independently of this reader: `dcmdump +L <plan>` parsed by
// tests/dicom/tools/plan_summary_from_dcmdump.py (no DICOM library), which, per beam, counts the control points
// whose ScanSpotMetersetWeights are not all zero, counts layers as changes of
// NominalBeamEnergy (inherited where absent) among them, counts their spots,
// and sums weight × BeamMeterset / FinalCumulativeMetersetWeight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ion_plan.h"

namespace protondose::dicom {
namespace {

using test::shared;

struct BeamExpectation {
  int number;
  std::size_t layers;
  std::size_t spots;
  double min_energy_mev;
  double max_energy_mev;
  double meterset;  // Σ spot meterset per fraction (MU or protons)
};

struct PlanExpectation {
  const char* path;
  int fractions;
  std::vector<BeamExpectation> beams;
};

// Relative tolerance for the meterset sums: dcmdump prints DS weights with
// the same digits the reader parses; only summation order differs.
constexpr double kMetersetRel = 1e-6;

void check_plan(const PlanExpectation& expected, const IonPlan& plan) {
  SCOPED_TRACE(expected.path);
  EXPECT_EQ(plan.number_of_fractions, expected.fractions);
  ASSERT_EQ(plan.beams.size(), expected.beams.size());
  for (std::size_t b = 0; b < expected.beams.size(); ++b) {
    const auto& e = expected.beams[b];
    const auto& beam = plan.beams[b];
    SCOPED_TRACE("beam " + std::to_string(e.number));
    EXPECT_EQ(beam.number, e.number);
    EXPECT_EQ(beam.layers.size(), e.layers);
    EXPECT_EQ(beam.spot_count(), e.spots);
    ASSERT_FALSE(beam.layers.empty());
    double lo = 1e9, hi = 0;
    for (const auto& layer : beam.layers) {
      lo = std::min(lo, layer.nominal_energy_mev);
      hi = std::max(hi, layer.nominal_energy_mev);
    }
    EXPECT_DOUBLE_EQ(lo, e.min_energy_mev);
    EXPECT_DOUBLE_EQ(hi, e.max_energy_mev);
    ASSERT_GT(e.meterset, 0.0);
    EXPECT_NEAR(beam.total_meterset(), e.meterset, kMetersetRel * e.meterset);
  }
}

const std::vector<PlanExpectation>& all_shared_plans() {
  static const std::vector<PlanExpectation> plans = {
      {"data/ion-plans/eclipse-pymchelper/RN.1.2.246.352.71.5.361940808526.37240.20200311150225.dcm", 1,
       {{1, 1, 117, 80, 80, 2340}, {2, 1, 117, 130, 130, 2340}, {3, 1, 117, 160, 160, 2340},
        {4, 1, 117, 210, 210, 2340}}},
      {"data/ion-plans/eclipse-pymchelper/RN.1.2.246.352.71.5.37402163639.162240.20220929101251.dcm", 1,
       {{1, 24, 13434, 78.269, 154.169, 60990.06}}},
      {"data/ion-plans/dcpt/plan01_sobp/RN.1.2.246.352.71.5.37402163639.178041.20221206101625.dcm", 1,
       {{1, 12, 3468, 113.119, 149.419, 17571.201}}},
      {"data/ion-plans/dcpt/plan01_sobp/RN.1.2.246.352.71.5.37402163639.178042.20221206101750.dcm", 1,
       {{1, 12, 3468, 113.128, 149.428, 8129.5704}}},
      {"data/ion-plans/dcpt/plan01_sobp/RN.1.2.246.352.71.5.37402163639.178319.20221207095327.dcm", 1,
       {{1, 21, 6069, 83.419, 149.419, 41806.741}}},
      {"data/ion-plans/dcpt/plan02_mono/RN.1.2.246.352.71.5.37402163639.178320.20221207095327.dcm", 1,
       {{1, 1, 323, 160, 160, 58414.548}}},
      {"data/ion-plans/dcpt/plan03_ramp_full/ramped_2Gy_ver2_full.dcm", 1,
       {{1, 22, 9218, 83.5, 149.4, 39294.15}, {2, 22, 9218, 83.5, 149.4, 39294.15}}},
      {"data/ion-plans/dcpt/plan04_ramp_middle/ramped_2Gy_ver1_middel.dcm", 1,
       {{1, 17, 7708, 84.9, 134.4, 40545.5}, {2, 17, 7708, 84.9, 134.4, 40545.5}}},
      {"data/ion-plans/dcpt/plan05_sobp_3d/RP1.2.752.243.1.1.20260105150247782.3480.60047.dcm", 1,
       {{1, 13, 5929, 81.7, 119.5, 52188.752}}},
      {"data/ion-plans/dcpt/plan06_sobp_4d/RP1.2.752.243.1.1.20260105182345801.4870.23686.dcm", 1,
       {{1, 15, 5775, 81.4, 125.9, 60606.055}}},
      {"data/ion-plans/dcpt/plan07_sobp_5d/RP1.2.752.243.1.1.20260105183531778.5030.32052.dcm", 1,
       {{1, 27, 7912, 82.7, 171.8, 63606.618}}},
      {"reference/slab_dcpt/plan.dcm", 1, {{1, 2, 242, 120, 150, 484}}},
      {"reference/water_dcpt/plan.dcm", 1, {{1, 3, 243, 100, 180, 243}}},
  };
  return plans;
}

TEST(IonPlanReader, LoadsEverySharedPlanWithIndependentlyCountedSpotsEnergiesAndMeterset) {
  for (const auto& expected : all_shared_plans()) check_plan(expected, read_ion_plan(shared(expected.path)));
}

TEST(IonPlanReader, ReadsBeamGeometryOfTheSlabReferencePlan) {
  // Values from reference/slab_dcpt/case.json and dcmdump of plan.dcm.
  const IonPlan plan = read_ion_plan(shared("reference/slab_dcpt/plan.dcm"));
  ASSERT_EQ(plan.beams.size(), 1u);
  const IonBeam& beam = plan.beams[0];
  EXPECT_EQ(beam.name, "G000");
  EXPECT_EQ(beam.machine_name, "DCPT_ProBeam_v5");
  EXPECT_EQ(beam.gantry_angle_deg, 0.0);
  EXPECT_EQ(beam.couch_angle_deg, 0.0);
  EXPECT_EQ(beam.isocenter_mm, (Vec3{0, 0, 0}));
  ASSERT_TRUE(beam.vsad_x_mm && beam.vsad_y_mm);
  EXPECT_DOUBLE_EQ(*beam.vsad_x_mm, 2000.0);
  EXPECT_DOUBLE_EQ(*beam.vsad_y_mm, 2560.0);
  EXPECT_EQ(beam.meterset_unit, MetersetUnit::kMonitorUnits);
  EXPECT_DOUBLE_EQ(beam.beam_meterset, 484.0);
  EXPECT_TRUE(beam.range_shifters.empty());
  ASSERT_EQ(beam.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(beam.layers[0].nominal_energy_mev, 150.0);
  ASSERT_TRUE(beam.layers[0].spot_fwhm_x_mm && beam.layers[0].spot_fwhm_y_mm);
  EXPECT_NEAR(*beam.layers[0].spot_fwhm_x_mm, 9.654, 1e-4);
  EXPECT_NEAR(*beam.layers[0].spot_fwhm_y_mm, 9.793, 1e-4);
  EXPECT_NEAR(*beam.layers[1].spot_fwhm_x_mm, 10.509, 1e-4);
  EXPECT_EQ(beam.layers[0].control_point_index, 0);
  EXPECT_EQ(beam.layers[1].control_point_index, 2);
  // First and 12th spot of the serpentine order (case.json spot_positions_iec_xy_mm).
  EXPECT_DOUBLE_EQ(beam.layers[0].spots[0].x_mm, -25.0);
  EXPECT_DOUBLE_EQ(beam.layers[0].spots[0].y_mm, -25.0);
  EXPECT_DOUBLE_EQ(beam.layers[0].spots[11].x_mm, 25.0);
  EXPECT_DOUBLE_EQ(beam.layers[0].spots[11].y_mm, -20.0);
  for (const auto& layer : beam.layers)
    for (const auto& spot : layer.spots) EXPECT_NEAR(spot.meterset, 2.0, 1e-9);
  EXPECT_EQ(plan.frame_of_reference_uid, "2.25.191645871060748269088958807794064710561");
  EXPECT_EQ(plan.sop_instance_uid, "2.25.142497418489424601541740899712324039686");
}

TEST(IonPlanReader, ReadsRangeShifterSettingsFromTheFirstControlPoint) {
  // dcmdump: RangeShifterID RS_3CM, setting IN, WET 34.2999992 (FL), iso distance 135.899994 (FL),
  // SnoutPosition 92.9000015, isocentre 0\-55\-0.446302, VSAD 2000\2560.
  const auto result = read_ion_plan_detailed(
      shared("data/ion-plans/dcpt/plan06_sobp_4d/RP1.2.752.243.1.1.20260105182345801.4870.23686.dcm"));
  const IonBeam& beam = result.plan.beams.at(0);
  ASSERT_EQ(beam.range_shifters.size(), 1u);
  EXPECT_EQ(beam.range_shifters[0].id, "RS_3CM");
  EXPECT_NEAR(beam.range_shifters[0].water_equivalent_thickness_mm, 34.3, 1e-5);
  ASSERT_TRUE(beam.range_shifters[0].isocenter_to_shifter_mm);
  EXPECT_NEAR(*beam.range_shifters[0].isocenter_to_shifter_mm, 135.9, 1e-5);
  ASSERT_TRUE(beam.snout_position_mm);
  EXPECT_NEAR(*beam.snout_position_mm, 92.9, 1e-5);
  EXPECT_NEAR(beam.isocenter_mm[1], -55.0, 1e-12);
  EXPECT_NEAR(beam.isocenter_mm[2], -0.446302, 1e-12);
  EXPECT_EQ(result.beams.at(0).patient_position, "HFS");
  EXPECT_EQ(result.beams.at(0).range_shifter_settings, std::vector<std::string>{"IN"});
  EXPECT_TRUE(result.warnings.empty());
}

TEST(IonPlanReader, ReadsOpposedBeamsOfTheRayStationPlan) {
  // dcmdump of plan03: GantryAngle 90 (beam 1) and 270 (beam 2).
  const IonPlan plan = read_ion_plan(shared("data/ion-plans/dcpt/plan03_ramp_full/ramped_2Gy_ver2_full.dcm"));
  ASSERT_EQ(plan.beams.size(), 2u);
  EXPECT_DOUBLE_EQ(plan.beams[0].gantry_angle_deg, 90.0);
  EXPECT_DOUBLE_EQ(plan.beams[1].gantry_angle_deg, 270.0);
}

TEST(IonPlanReader, RefusesTheTopasDemoApertureByDefault) {
  EXPECT_THROW_WITH(read_ion_plan(shared("data/ion-plans/topas-demo/rtip_demo.dcm")), UnavailableError,
                    "beam 1 'beam0'", "aperture", "IonBlockSequence");
}

TEST(IonPlanReader, LoadsTheTopasDemoWhenApertureAndMissingShifterSettingsAreAllowed) {
  // dcmdump: PrimaryDosimeterUnit NP, VSAD 1800\2000, gantry 90, 14 fractions,
  // 12 layers, 246 spots, 120.96–155.03 MeV, Σ weights = BeamMeterset 2.48879e10 protons.
  IonPlanReadOptions options;
  options.drop_apertures = true;
  options.allow_range_shifter_without_settings = true;
  const auto result = read_ion_plan_detailed(shared("data/ion-plans/topas-demo/rtip_demo.dcm"), options);
  check_plan({"data/ion-plans/topas-demo/rtip_demo.dcm", 14, {{1, 12, 246, 120.96, 155.03, 2.4887896e10}}},
             result.plan);
  const IonBeam& beam = result.plan.beams[0];
  EXPECT_EQ(beam.meterset_unit, MetersetUnit::kProtons);
  EXPECT_DOUBLE_EQ(*beam.vsad_x_mm, 1800.0);
  EXPECT_DOUBLE_EQ(*beam.vsad_y_mm, 2000.0);
  EXPECT_DOUBLE_EQ(beam.gantry_angle_deg, 90.0);
  EXPECT_TRUE(beam.range_shifters.empty());
  EXPECT_TRUE(result.beams[0].aperture_dropped);
  EXPECT_EQ(result.beams[0].range_shifters_not_inserted, std::vector<std::string>{"40mm"});
  EXPECT_EQ(result.warnings.size(), 2u);
}

TEST(IonPlanReader, RefusesTopasDemoRangeShifterWithoutSettingsWhenOnlyApertureIsAllowed) {
  IonPlanReadOptions options;
  options.drop_apertures = true;
  EXPECT_THROW_WITH(read_ion_plan_detailed(shared("data/ion-plans/topas-demo/rtip_demo.dcm"), options),
                    InputError, "beam 1 'beam0'", "control point 0",
                    "RangeShifterSettingsSequence (300a,0360)");
}

}  // namespace
}  // namespace protondose::dicom
