#include "protondose/engine/dose_engine.h"
#include "protondose/engine/geometry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"
#include "engine_cases.h"
#include "expect_error.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::CtImage;
using protondose::Grid3;
using protondose::IonBeam;
using protondose::IonPlan;
using protondose::Volume;

namespace {

/// A 2 mm CT of air with a water cube of half-width `half_mm` centred on the origin.
CtImage water_cube_ct(double half_mm) {
  CtImage ct = pt::ct_from({60, 60, 60}, {2, 2, 2}, {-59, -59, -59}, [&](const protondose::Vec3& p) {
    return std::abs(p[0]) < half_mm && std::abs(p[1]) < half_mm && std::abs(p[2]) < half_mm ? 0.0 : -1000.0;
  });
  ct.frame_of_reference_uid = "2.25.1";
  return ct;
}

/// One beam of one 100 MeV layer (range ≈ 77 mm), 5 × 5 spots on a 5 mm grid, 1 MU each.
IonPlan small_plan(double gantry_deg) {
  IonPlan plan;
  plan.label = "unit";
  plan.frame_of_reference_uid = "2.25.1";
  IonBeam b = pt::square_field_beam(1, gantry_deg, {100.0}, 10, 5, 1.0);
  b.name = "B1";
  b.beam_meterset = 25;
  plan.beams.push_back(b);
  return plan;
}

pe::DoseEngineOptions fast_options() {
  pe::DoseEngineOptions o;
  o.ray_pitch_mm = 2;
  o.depth_step_mm = 1;
  o.threads = 2;
  return o;
}

const protondose::physics::BeamModel& machine() {
  static const protondose::physics::BeamModel m = protondose::physics::load_machine("DCPT_ProBeam_v5");
  return m;
}

pe::DoseEngine make_engine(const pe::DoseEngineOptions& o = fast_options()) {
  return pe::DoseEngine(machine(), protondose::physics::default_hu_curve(), o);
}

}  // namespace

TEST(DoseEngine, ConservesEnergyAndGivesABraggPeakAtTheExpectedDepthInWater) {
  const CtImage ct = water_cube_ct(50);
  const pe::DoseResult r = make_engine().compute(ct, small_plan(0));
  ASSERT_GT(r.max_dose_gy, 0.0);
  EXPECT_LT(std::abs(r.energy.relative_difference()), r.energy_balance_tolerance);
  // Almost all of what the spots carry is deposited in the 100 mm cube (range 77 mm).
  EXPECT_NEAR(r.energy.expected_mev / r.energy.carried_mev, 1.0, 0.01);
  // Central-axis depth dose: the peak lies near R80 − 2 mm of the 100 MeV curve (76.9 mm, README).
  const Grid3& g = r.dose_gy.grid;
  int j_max = 0;
  for (int j = 0; j < g.size[1]; ++j)
    if (r.dose_gy.at(29, j, 29) + r.dose_gy.at(30, j, 30) > r.dose_gy.at(29, j_max, 29) + r.dose_gy.at(30, j_max, 30))
      j_max = j;
  const double peak_depth_mm = g.position_mm(0, j_max, 0)[1] + 50;  // surface at y = −50
  EXPECT_NEAR(peak_depth_mm, 75.3, 2.5);
  EXPECT_EQ(r.spots, 25u);
  EXPECT_EQ(r.beams.size(), 1u);
}

TEST(DoseEngine, Gantry90GivesTheGantry0DoseTurnedOntoThePatientXAxis) {
  const CtImage ct = water_cube_ct(50);
  const pe::DoseEngine e = make_engine();
  const pe::DoseResult g0 = e.compute(ct, small_plan(0));
  const pe::DoseResult g90 = e.compute(ct, small_plan(90));
  // G0 runs along +y from y = −50; G90 along −x from x = +50. Compare depth
  // profiles through the axis (mean of the 2×2 voxels around it).
  const auto& a = g0.dose_gy;
  const auto& b = g90.dose_gy;
  double worst = 0;
  for (int s = 0; s < 37; ++s) {  // depth = 2 s + 1 mm from the surface, to 73 mm (R80 77 mm)
    const double d0 = 0.25 * (a.at(29, 5 + s, 29) + a.at(30, 5 + s, 29) + a.at(29, 5 + s, 30) + a.at(30, 5 + s, 30));
    const double d90 = 0.25 * (b.at(54 - s, 29, 29) + b.at(54 - s, 30, 29) + b.at(54 - s, 29, 30) + b.at(54 - s, 30, 30));
    ASSERT_GT(d0, 0.0) << "depth index " << s << " G90 " << d90 << " max " << g0.max_dose_gy << " " << g90.max_dose_gy;
    worst = std::max(worst, std::abs(d90 / d0 - 1));
  }
  // Only the spot shape differs (σx ≠ σy of the optics, and which patient axis each lies on).
  EXPECT_LT(worst, 0.02);
}

TEST(DoseEngine, RbeFactorScalesTheDoseAndIsReported) {
  const CtImage ct = water_cube_ct(50);
  pe::DoseEngineOptions o = fast_options();
  const pe::DoseResult physical = make_engine(o).compute(ct, small_plan(0));
  o.rbe_factor = 1.1;
  const pe::DoseResult effective = make_engine(o).compute(ct, small_plan(0));
  ASSERT_TRUE(effective.rbe_factor.has_value());
  EXPECT_NEAR(effective.max_dose_gy / physical.max_dose_gy, 1.1, 1e-5);
}

TEST(DoseEngine, DoseToMediumEqualsDoseToWaterInWater) {
  const CtImage ct = water_cube_ct(50);
  pe::DoseEngineOptions o = fast_options();
  const pe::DoseResult w = make_engine(o).compute(ct, small_plan(0));
  o.quantity = pe::DoseQuantity::kDoseToMedium;
  const pe::DoseResult m = make_engine(o).compute(ct, small_plan(0));
  // Inside the cube (away from the air boundary) the two agree.
  EXPECT_NEAR(m.dose_gy.at(30, 40, 30), w.dose_gy.at(30, 40, 30), 1e-6 * w.max_dose_gy + 1e-4 * w.dose_gy.at(30, 40, 30));
  EXPECT_GT(w.dose_gy.at(30, 40, 30), 0.1f * static_cast<float>(w.max_dose_gy));
}

TEST(DoseEngine, CoarserOutputGridKeepsTheCtExtent) {
  Grid3 ct;
  ct.size = {60, 60, 40};
  ct.spacing_mm = {2, 2, 3};
  ct.origin_mm = {-59, -59, -58.5};
  const Grid3 g = pe::output_grid(ct, 4.0);
  EXPECT_EQ(g.size, (std::array<int, 3>{30, 30, 30}));
  EXPECT_DOUBLE_EQ(g.origin_mm[0], -58);  // first face at −60 mm, centre 2 mm inside
  EXPECT_DOUBLE_EQ(g.origin_mm[2], -58);
  EXPECT_EQ(pe::output_grid(ct, std::nullopt), ct);
  EXPECT_THROW(pe::output_grid(ct, -1.0), protondose::ConfigError);
}

TEST(DoseEngine, UnavailableGpuBackendIsAnErrorNotAFallback) {
  std::string why;
  if (pe::gpu_backend_usable(&why)) GTEST_SKIP() << "a GPU is usable here; the unavailable path cannot be exercised";
  pe::DoseEngineOptions o = fast_options();
  o.backend = pe::Backend::kGpu;
  try {
    make_engine(o);
    FAIL() << "expected UnavailableError";
  } catch (const protondose::UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu-scatter-tensor-core"), std::string::npos) << e.what();
  }
}

TEST(DoseEngine, RejectsAPlanForAnotherMachine) {
  IonPlan plan = small_plan(0);
  plan.beams[0].machine_name = "OtherMachine";
  try {
    make_engine().compute(water_cube_ct(50), plan);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("beam 1 'B1': TreatmentMachineName 'OtherMachine'"), std::string::npos)
        << e.what();
  }
}

TEST(DoseEngine, RejectsAnEnergyOutsideTheBeamModel) {
  IonPlan plan = small_plan(0);
  plan.beams[0].layers[0].nominal_energy_mev = 300;
  try {
    make_engine().compute(water_cube_ct(50), plan);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
}

TEST(DoseEngine, RejectsABeamThatMissesThePatient) {
  IonPlan plan = small_plan(0);
  plan.beams[0].isocenter_mm = {0, 0, 500};  // the field passes beside the CT
  try {
    make_engine().compute(water_cube_ct(50), plan);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("meets the patient"), std::string::npos) << e.what();
  }
}

TEST(DoseEngine, RejectsAnUnsupportedPatientPosition) {
  CtImage ct = water_cube_ct(50);
  ct.patient_position = "HFDR";
  EXPECT_THROW(make_engine().compute(ct, small_plan(0)), protondose::UnavailableError);
}

TEST(DoseEngine, RejectsARangeShifterWithoutDistance) {
  IonPlan plan = small_plan(0);
  protondose::RangeShifter rs;
  rs.id = "RS_3CM";
  rs.water_equivalent_thickness_mm = 34.3;
  plan.beams[0].range_shifters.push_back(rs);
  try {
    make_engine().compute(water_cube_ct(50), plan);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'RS_3CM' has no IsocenterToRangeShifterDistance"), std::string::npos)
        << e.what();
  }
}

TEST(DoseEngine, RangeShifterPullsTheRangeBackByItsWet) {
  const CtImage ct = water_cube_ct(58);  // surface at y = −58 mm, 116 mm of water
  IonPlan plan = small_plan(0);
  plan.beams[0].layers[0].nominal_energy_mev = 140;  // R80 139.8 mm: stops in the cube only behind the shifter
  protondose::RangeShifter rs;
  rs.id = "RS_3CM";
  rs.water_equivalent_thickness_mm = 34.3;
  rs.isocenter_to_shifter_mm = 135.9;
  plan.beams[0].range_shifters.push_back(rs);
  const pe::DoseResult r = make_engine().compute(ct, plan);
  EXPECT_LT(std::abs(r.energy.relative_difference()), r.energy_balance_tolerance);
  const Grid3& g = r.dose_gy.grid;
  std::vector<double> depth, dose;
  double dmax = 0;
  for (int j = 0; j < g.size[1]; ++j) {
    depth.push_back(g.position_mm(0, j, 0)[1] + 58);
    dose.push_back(0.25 * (r.dose_gy.at(29, j, 29) + r.dose_gy.at(30, j, 29) + r.dose_gy.at(29, j, 30) +
                           r.dose_gy.at(30, j, 30)));
    dmax = std::max(dmax, dose.back());
  }
  ASSERT_GT(dmax, 0.0);
  double r80 = -1;
  for (std::size_t j = dose.size() - 1; j > 0; --j)
    if (dose[j - 1] >= 0.8 * dmax && dose[j] < 0.8 * dmax) {
      r80 = depth[j - 1] + (dose[j - 1] - 0.8 * dmax) / (dose[j - 1] - dose[j]) * (depth[j] - depth[j - 1]);
      break;
    }
  EXPECT_NEAR(r80, 139.78 - 34.3, 1.5);
}

TEST(DoseEngineOptions, RejectsNonPositiveRayPitch) {
  pe::DoseEngineOptions o;
  o.ray_pitch_mm = 0;
  try {
    o.validate();
    FAIL() << "expected ConfigError";
  } catch (const protondose::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ray_pitch_mm = 0"), std::string::npos) << e.what();
  }
}

TEST(DoseEngineOptions, RejectsAZeroStackBudget) {
  pe::DoseEngineOptions o;
  o.max_stack_bytes = 0;
  try {
    o.validate();
    FAIL() << "expected ConfigError";
  } catch (const protondose::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("max_stack_bytes = 0"), std::string::npos) << e.what();
  }
}

TEST(DoseEngineOptions, AGpuMemoryShareOutsideZeroToOneIsAConfigErrorNamingIt) {
  for (double share : {0.0, -0.5, 1.5, std::nan("")}) {
    pe::DoseEngineOptions o;
    o.gpu_memory_share = share;
    try {
      o.validate();
      FAIL() << "expected ConfigError for " << share;
    } catch (const protondose::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("gpu_memory_share"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("(0, 1]"), std::string::npos) << e.what();
    }
  }
  pe::DoseEngineOptions half;
  half.gpu_memory_share = 0.5;
  EXPECT_NO_THROW(half.validate());
}

TEST(DoseEngineOptions, RejectsANegativeGpuDevice) {
  pe::DoseEngineOptions o;
  o.gpu_device = -1;
  try {
    o.validate();
    FAIL() << "expected ConfigError";
  } catch (const protondose::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_device = -1"), std::string::npos) << e.what();
  }
}

TEST(DoseEngineOptions, ParsesBackendNamesAndRejectsOthers) {
  EXPECT_EQ(pe::parse_backend("gpu-gather"), pe::Backend::kGpuGather);
  EXPECT_STREQ(pe::backend_name(pe::Backend::kCpu), "cpu");
  try {
    pe::parse_backend("fast");
    FAIL() << "expected ConfigError";
  } catch (const protondose::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'fast' is unknown; accepted: cpu, gpu, gpu-gather"), std::string::npos);
  }
}

TEST(CheckDoseValues, NamesTheFirstNegativeOrNonFiniteVoxel) {
  Grid3 g;
  g.size = {2, 2, 2};
  Volume<float> d(g, 1.0f);
  EXPECT_NO_THROW(pe::check_dose_values(d, "test dose"));
  d.at(1, 0, 1) = std::numeric_limits<float>::quiet_NaN();
  try {
    pe::check_dose_values(d, "test dose");
    FAIL() << "expected NumericalError";
  } catch (const protondose::NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("test dose: dose nan Gy at voxel (1, 0, 1)"), std::string::npos) << e.what();
  }
  d.at(1, 0, 1) = -1e-3f;
  EXPECT_THROW(pe::check_dose_values(d, "test dose"), protondose::NumericalError);
}

TEST(DoseEngine, NuclearHaloMovesDoseFromTheFieldCentreToItsSurroundingsAndKeepsTheEnergy) {
  const CtImage ct = water_cube_ct(50);
  pe::DoseEngineOptions o = fast_options();
  IonPlan plan = small_plan(0);
  plan.beams[0].layers[0].nominal_energy_mev = 130;  // R80 ≈ 123 mm: the halo grows over the whole cube
  const pe::DoseResult with = make_engine(o).compute(ct, plan);
  o.nuclear_halo = false;
  const pe::DoseResult without = make_engine(o).compute(ct, plan);
  EXPECT_NEAR(with.energy.deposited_mev / without.energy.deposited_mev, 1.0, 0.01);
  // 60 mm deep on the axis (inside the 20 mm field) and 30 mm beside the field edge.
  const double centre_with = with.dose_gy.at(29, 34, 29), centre_without = without.dose_gy.at(29, 34, 29);
  const double out_with = with.dose_gy.at(29 + 20, 34, 29), out_without = without.dose_gy.at(29 + 20, 34, 29);
  ASSERT_GT(centre_without, 0.0);
  EXPECT_LT(centre_with, 0.99 * centre_without);
  EXPECT_GT(out_with, 2 * out_without + 1e-9);
  EXPECT_GT(with.timings.nuclear_halo_s, 0.0);
}

TEST(DoseEngine, ObliqueBeamWithCouchRotationDepositsAlongItsAxis) {
  const CtImage ct = water_cube_ct(58);
  IonPlan plan = small_plan(45);
  plan.beams[0].couch_angle_deg = 30;
  const pe::DoseResult r = make_engine().compute(ct, plan);
  EXPECT_LT(std::abs(r.energy.relative_difference()), r.energy_balance_tolerance);
  const pe::BeamFrame frame(45, 30, {0, 0, 0}, pe::PatientPosition::kHfs);
  // The dose-weighted lateral centroid (beam x, y) of the voxels above half the maximum lies on the axis.
  const Grid3& g = r.dose_gy.grid;
  double w = 0, cx = 0, cy = 0;
  for (int k = 0; k < g.size[2]; ++k)
    for (int j = 0; j < g.size[1]; ++j)
      for (int i = 0; i < g.size[0]; ++i) {
        const double d = r.dose_gy.at(i, j, k);
        if (d < 0.5 * r.max_dose_gy) continue;
        const protondose::Vec3 b = frame.beam_from_patient(g.position_mm(i, j, k));
        w += d;
        cx += d * b[0];
        cy += d * b[1];
      }
  ASSERT_GT(w, 0.0);
  EXPECT_NEAR(cx / w, 0.0, 1.0);
  EXPECT_NEAR(cy / w, 0.0, 1.0);
}

TEST(DoseEngine, CoarserOutputGridKeepsTheEnergyAndTheMaximum) {
  const CtImage ct = water_cube_ct(50);
  pe::DoseEngineOptions o = fast_options();
  const pe::DoseResult fine = make_engine(o).compute(ct, small_plan(0));
  o.output_spacing_mm = 3.0;
  const pe::DoseResult coarse = make_engine(o).compute(ct, small_plan(0));
  EXPECT_EQ(coarse.dose_gy.grid.size, (std::array<int, 3>{40, 40, 40}));
  EXPECT_LT(std::abs(coarse.energy.relative_difference()), coarse.energy_balance_tolerance);
  EXPECT_NEAR(coarse.energy.deposited_mev / fine.energy.deposited_mev, 1.0, 0.02);
  EXPECT_NEAR(coarse.max_dose_gy / fine.max_dose_gy, 1.0, 0.05);
}

TEST(DoseEngine, AnHuOutsideTheCurveNamesItsVoxelOrIsClampedWhenAskedAndNanIsRefused) {
  CtImage ct = water_cube_ct(50);
  const std::size_t last = ct.hu.data.size() - 1;  // in the last chunk of the parallel conversion
  ct.hu.data[last] = 40000.0f;
  const std::string msg = protondose::testing::message_of<protondose::InputError>([&] { make_engine().prepare(ct); });
  EXPECT_NE(msg.find("HU 40000 at voxel " + std::to_string(last)), std::string::npos) << msg;
  pe::DoseEngineOptions o = fast_options();
  o.hu_policy = protondose::physics::HuCoveragePolicy::kClampToEnds;
  const auto clamped = make_engine(o).prepare(ct);
  CtImage reference = water_cube_ct(50);
  reference.hu.data[last] = 1e9f;  // any HU above the curve clamps to its last row
  const auto reference_prepared = make_engine(o).prepare(reference);
  EXPECT_EQ(clamped->rsp.data, reference_prepared->rsp.data);
  EXPECT_NE(protondose::testing::message_of<protondose::ConfigError>([&] { make_engine(o).prepare(ct, 0.0); })
                .find("rsp_scale 0 must be a finite number > 0"),
            std::string::npos);
  const auto scaled = make_engine(o).prepare(reference, 1.035);
  EXPECT_FLOAT_EQ(scaled->rsp.data[0], static_cast<float>(reference_prepared->rsp.data[0] * 1.035));
  EXPECT_EQ(scaled->density.data, reference_prepared->density.data);
  ct.hu.data[7] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan_msg = protondose::testing::message_of<protondose::InputError>([&] { make_engine(o).prepare(ct); });
  EXPECT_NE(nan_msg.find("voxel 7 has a non-finite CT number"), std::string::npos) << nan_msg;
}

TEST(DoseEngine, ARangeScenarioRescaledFromTheNominalCtIsBitwiseItsOwnPreparation) {
  // Robust's range scenarios scale the nominal's RSP instead of converting
  // the HU again: the result must be what prepare() gives at that scale,
  // on the CT grid and (resampled from the scaled RSP) on a coarser output grid.
  CtImage ct = water_cube_ct(50);
  for (std::size_t i = 0; i < ct.hu.data.size(); i += 7) ct.hu.data[i] = static_cast<float>(static_cast<int>(i % 2300) - 900);
  for (const std::optional<double> spacing : {std::optional<double>{}, std::optional<double>{3.0}}) {
    pe::DoseEngineOptions o = fast_options();
    o.output_spacing_mm = spacing;
    const pe::DoseEngine engine = make_engine(o);
    const auto nominal = engine.prepare(ct);
    for (double scale : {0.965, 1.035}) {
      const auto direct = engine.prepare(ct, scale);
      const auto rescaled = pe::rescaled_ct(*nominal, scale);
      EXPECT_EQ(rescaled->rsp.data, direct->rsp.data) << scale;
      EXPECT_EQ(rescaled->density.data, direct->density.data);
      EXPECT_EQ(rescaled->out_rsp.data, direct->out_rsp.data);
      EXPECT_EQ(rescaled->out_density.data, direct->out_density.data);
      EXPECT_EQ(rescaled->out_grid, direct->out_grid);
      EXPECT_EQ(rescaled->inverse_length_table, direct->inverse_length_table);
      EXPECT_EQ(rescaled->rsp_scale, scale);
      EXPECT_NE(rescaled->id, nominal->id);
      EXPECT_NE(rescaled->rsp.data, nominal->rsp.data);
    }
    EXPECT_EQ(spacing.has_value(), !nominal->out_rsp.data.empty());
    const auto scaled = pe::rescaled_ct(*nominal, 1.035);
    const std::string twice = protondose::testing::message_of<protondose::InternalError>(
        [&] { pe::rescaled_ct(*scaled, 1.035); });
    EXPECT_NE(twice.find("prepared at rsp_scale 1.035, not the nominal 1"), std::string::npos) << twice;
    for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
      const std::string msg =
          protondose::testing::message_of<protondose::ConfigError>([&] { pe::rescaled_ct(*nominal, bad); });
      EXPECT_NE(msg.find("must be a finite number > 0"), std::string::npos) << msg;
    }
  }
}

TEST(DoseEngine, TheDefaultHaloGridIsAsAccurateAsTheFinerOneAndAPitchOutsideTheRangeIsRefused) {
  // The fitted halo's default coarse pitch (8 mm) against 4 mm: the engine's
  // choice must not move the dose by more than a few tenths of a percent.
  const CtImage ct = water_cube_ct(58);
  const IonPlan plan = small_plan(0);
  pe::DoseEngineOptions o = fast_options();
  ASSERT_EQ(o.effective_halo_pitch_mm(), 8.0);
  const pe::DoseResult coarse = make_engine(o).compute(ct, plan);
  o.halo_pitch_mm = 4.0;
  const pe::DoseResult fine = make_engine(o).compute(ct, plan);
  ASSERT_GT(fine.max_dose_gy, 0.0);
  double worst = 0;
  for (std::size_t i = 0; i < fine.dose_gy.data.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(fine.dose_gy.data[i]) - coarse.dose_gy.data[i]));
  EXPECT_LT(worst, 0.005 * fine.max_dose_gy);
  EXPECT_GT(worst, 0.0) << "the pitch made no difference: is the option used?";
  o.halo_pitch_mm = 0.0;
  EXPECT_NE(protondose::testing::message_of<protondose::ConfigError>([&] { make_engine(o); }).find("halo_pitch_mm = 0"),
            std::string::npos);
  o.halo_pitch_mm.reset();
  o.halo_model = protondose::physics::HaloModel::kSoukup2005;
  EXPECT_EQ(o.effective_halo_pitch_mm(), 4.0);
}

TEST(DoseEngine, ThePublishedHaloModelRunsConservesEnergyAndMovesDoseIntoTheTail) {
  const CtImage ct = water_cube_ct(58);
  const IonPlan plan = small_plan(0);
  pe::DoseEngineOptions o = fast_options();
  const pe::DoseResult fitted = make_engine(o).compute(ct, plan);
  o.halo_model = protondose::physics::HaloModel::kSoukup2005;
  const pe::DoseResult soukup = make_engine(o).compute(ct, plan);
  ASSERT_GT(fitted.max_dose_gy, 0.0);
  EXPECT_LT(std::abs(soukup.energy.relative_difference()), soukup.energy_balance_tolerance);
  // Same pencils, same energy in the stack: only where the halo share goes differs.
  EXPECT_NEAR(soukup.energy.expected_mev / fitted.energy.expected_mev, 1.0, 1e-9);
  double worst = 0;
  for (std::size_t i = 0; i < fitted.dose_gy.data.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(fitted.dose_gy.data[i]) - soukup.dose_gy.data[i]));
  EXPECT_GT(worst, 1e-4 * fitted.max_dose_gy) << "the halo model made no difference";
  EXPECT_LT(worst, 0.1 * fitted.max_dose_gy);
}

TEST(DoseEngine, StackSplitIntoLayerGroupsGivesTheSameDose) {
  const CtImage ct = water_cube_ct(58);
  IonPlan plan = small_plan(0);
  for (double e : {120.0, 110.0, 90.0}) {
    protondose::EnergyLayer layer = plan.beams[0].layers[0];
    layer.nominal_energy_mev = e;
    plan.beams[0].layers.push_back(layer);
  }
  pe::DoseEngineOptions o = fast_options();
  const pe::DoseResult one = make_engine(o).compute(ct, plan);
  o.max_stack_bytes = 1 << 20;  // far below one layer's stack: one group per layer
  const pe::DoseResult split = make_engine(o).compute(ct, plan);
  ASSERT_GT(one.max_dose_gy, 0.0);
  EXPECT_EQ(one.beams[0].bev_pixels, split.beams[0].bev_pixels);
  double worst = 0;
  for (std::size_t i = 0; i < one.dose_gy.data.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(one.dose_gy.data[i]) - split.dose_gy.data[i]));
  EXPECT_LE(worst, 1e-5 * one.max_dose_gy);
  EXPECT_NEAR(split.energy.relative_difference(), one.energy.relative_difference(), 1e-6);
}

// The spots are converted and validated while the trace runs, after a first
// pass that sizes the BEV grid from their extent: a bad spot must still be the
// error the user sees (not a grid error from a NaN or infinite extent), in a
// layer that reaches the patient or in one that stops in the range shifter.
TEST(DoseEngine, ABadSpotIsTheErrorEvenWhereItWouldSpoilTheGrid) {
  const CtImage ct = water_cube_ct(50);
  const auto expect_spot_error = [&](const IonPlan& plan, const std::string& what) {
    try {
      make_engine().compute(ct, plan);
      ADD_FAILURE() << "no error for " << what;
    } catch (const protondose::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("beam 1 'B1': spot 3 at ("), std::string::npos) << what << ": " << e.what();
    }
  };
  IonPlan plan = small_plan(0);
  plan.beams[0].layers[0].spots[3].x_mm = std::numeric_limits<double>::quiet_NaN();
  expect_spot_error(plan, "a NaN position");
  plan = small_plan(0);
  plan.beams[0].layers[0].spots[3].y_mm = std::numeric_limits<double>::infinity();
  expect_spot_error(plan, "an infinite position");
  plan = small_plan(0);
  plan.beams[0].layers[0].spots[3].meterset = std::numeric_limits<double>::infinity();
  expect_spot_error(plan, "an infinite meterset");
  // Every spot infinitely far: the extent alone would make no grid.
  plan = small_plan(0);
  for (auto& spot : plan.beams[0].layers[0].spots) spot.x_mm = std::numeric_limits<double>::infinity();
  try {
    make_engine().compute(ct, plan);
    ADD_FAILURE() << "no error for spots at infinity";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("spot 0 at (inf"), std::string::npos) << e.what();
  }
  // A layer that stops in a 300 mm range shifter still has its spots checked.
  plan = small_plan(0);
  protondose::RangeShifter rs;
  rs.id = "RS300";
  rs.water_equivalent_thickness_mm = 300;
  rs.isocenter_to_shifter_mm = 300;
  plan.beams[0].range_shifters.push_back(rs);
  plan.beams[0].layers[0].spots[3].x_mm = std::numeric_limits<double>::quiet_NaN();
  expect_spot_error(plan, "a NaN position in a layer that stops in the shifter");
}

TEST(DoseEngine, BeamWithoutMetersetAddsNothingAndAPlanWithoutAnyIsRejected) {
  const CtImage ct = water_cube_ct(50);
  IonPlan plan = small_plan(0);
  IonBeam setup = plan.beams[0];
  setup.number = 2;
  setup.name = "SETUP";
  for (auto& spot : setup.layers[0].spots) spot.meterset = 0;
  plan.beams.push_back(setup);
  const pe::DoseResult r = make_engine().compute(ct, plan);
  ASSERT_EQ(r.beams.size(), 2u);
  EXPECT_EQ(r.beams[1].spots, 0u);
  EXPECT_EQ(r.spots, 25u);
  plan.beams.erase(plan.beams.begin());
  try {
    make_engine().compute(ct, plan);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no beam has a spot with positive meterset"), std::string::npos) << e.what();
  }
}

// The per-energy tables (residual energy, scattering power, halo, range-shifter
// moments) are cached by the engine and the layers point into them: a warm
// engine's second computation of a plan, and a plan that mixes shifted and
// unshifted beams of the same energies, give bitwise the dose of a fresh
// engine — without the halo (no halo tables), with the fitted halo, and with
// Soukup's (σ_N added to the core).
TEST(DoseEngine, CachedLayerTablesGiveBitwiseTheDoseOfAFreshEngine) {
  const CtImage ct = water_cube_ct(58);
  IonPlan plan = small_plan(0);
  plan.beams[0].layers[0].nominal_energy_mev = 140;
  IonPlan shifted = plan;
  protondose::RangeShifter rs;
  rs.id = "RS_3CM";
  rs.water_equivalent_thickness_mm = 34.3;
  rs.isocenter_to_shifter_mm = 135.9;
  shifted.beams[0].range_shifters.push_back(rs);
  auto same = [](const pe::DoseResult& a, const pe::DoseResult& b) {
    return a.dose_gy.data.size() == b.dose_gy.data.size() &&
           std::memcmp(a.dose_gy.data.data(), b.dose_gy.data.data(), a.dose_gy.data.size() * sizeof(float)) == 0;
  };
  struct Halo {
    const char* name;
    bool on;
    protondose::physics::HaloModel model;
  };
  std::vector<pe::DoseResult> shifted_by_halo;
  for (const Halo& h : {Halo{"no halo", false, protondose::physics::kDefaultHaloModel},
                        Halo{"fitted halo", true, protondose::physics::HaloModel::kMcsquareFit},
                        Halo{"Soukup halo", true, protondose::physics::HaloModel::kSoukup2005}}) {
    SCOPED_TRACE(h.name);
    pe::DoseEngineOptions o = fast_options();
    o.nuclear_halo = h.on;
    o.halo_model = h.model;
    const pe::DoseEngine warm = make_engine(o);
    const pe::DoseResult first_plain = warm.compute(ct, plan);
    const pe::DoseResult first_shifted = warm.compute(ct, shifted);
    const pe::DoseResult again_plain = warm.compute(ct, plan);
    const pe::DoseResult again_shifted = warm.compute(ct, shifted);
    const pe::DoseResult fresh_shifted = make_engine(o).compute(ct, shifted);
    ASSERT_GT(first_shifted.max_dose_gy, 0.0);
    EXPECT_TRUE(same(first_plain, again_plain));
    EXPECT_TRUE(same(first_shifted, again_shifted));
    EXPECT_TRUE(same(first_shifted, fresh_shifted));
    // The shifter's tables are not the unshifted ones: the doses differ.
    EXPECT_FALSE(same(first_plain, first_shifted));
    shifted_by_halo.push_back(first_shifted);
  }
  // Each halo setting reaches the dose (its tables are used, not skipped).
  EXPECT_FALSE(same(shifted_by_halo[0], shifted_by_halo[1]));
  EXPECT_FALSE(same(shifted_by_halo[0], shifted_by_halo[2]));
  EXPECT_FALSE(same(shifted_by_halo[1], shifted_by_halo[2]));
}
