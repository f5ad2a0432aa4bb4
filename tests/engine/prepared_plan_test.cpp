// A prepared plan (DoseEngine::prepare_plan): the plan's checks happen at its
// preparation, and computing it gives bitwise the dose of the plan itself, on
// every CT it is computed on (CPU backend: the double-precision oracle is
// deterministic). tests/engine/gpu/backend_test.cpp checks the GPU's device
// copies of prepared beams.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "protondose/core/error.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"
#include "engine_cases.h"
#include "expect_error.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::CtImage;
using protondose::IonBeam;
using protondose::IonPlan;
using protondose::testing::message_of;

namespace {

/// A 2 mm CT of air with a water box of half-widths `half_mm` centred on `centre_mm`.
CtImage water_box_ct(std::array<int, 3> voxels, protondose::Vec3 half_mm, protondose::Vec3 centre_mm) {
  const protondose::Vec3 origin{-(voxels[0] - 1.0), -(voxels[1] - 1.0), -(voxels[2] - 1.0)};  // centred, 2 mm
  return pt::ct_from(voxels, {2, 2, 2}, origin, [&](const protondose::Vec3& p) {
    for (int a = 0; a < 3; ++a)
      if (std::abs(p[a] - centre_mm[a]) >= half_mm[a]) return -1000.0;
    return 0.0;
  });
}

/// Two beams (gantry 0 and 90) of two layers, 5 × 5 spots on a 5 mm grid.
IonPlan two_beam_plan() {
  IonPlan plan;
  plan.label = "prepared";
  plan.number_of_fractions = 3;
  for (int b = 0; b < 2; ++b) {
    IonBeam beam = pt::square_field_beam(b + 1, 90.0 * b, {100.0, 110.0}, 10, 5, 1.0);
    beam.name = "B" + std::to_string(b + 1);
    plan.beams.push_back(beam);
  }
  return plan;
}

pe::DoseEngine make_engine() {
  static const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  pe::DoseEngineOptions o;
  o.ray_pitch_mm = 2;
  o.threads = 2;
  return pe::DoseEngine(machine, protondose::physics::default_hu_curve(), o);
}

bool bitwise_equal(const protondose::Volume<float>& a, const protondose::Volume<float>& b) {
  return a.data.size() == b.data.size() && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(PreparedPlan, ReportsItsPlanAndAnIdOfItsOwn) {
  const pe::DoseEngine engine = make_engine();
  const auto a = engine.prepare_plan(two_beam_plan());
  const auto b = engine.prepare_plan(two_beam_plan());
  EXPECT_EQ(a->label(), "prepared");
  EXPECT_EQ(a->fractions(), 3);
  EXPECT_EQ(a->beam_count(), 2u);
  EXPECT_EQ(a->spots(), 2u * 2u * 25u);
  EXPECT_GT(a->preparation_s(), 0.0);
  EXPECT_NE(a->id(), 0u);
  EXPECT_NE(a->id(), b->id());
}

// One prepared plan on three CTs — the water box in the middle, moved
// off-centre, and in a CT of another size, so that each beam's grid (its
// extent in depth, hence its margin and its first ray) differs — gives
// bitwise the dose of the plan computed on each, and its timings show no
// plan preparation.
TEST(PreparedPlan, GivesBitwiseTheDoseOfItsPlanOnEveryCt) {
  const pe::DoseEngine engine = make_engine();
  const IonPlan plan = two_beam_plan();
  const auto prepared = engine.prepare_plan(plan);
  const CtImage cts[] = {water_box_ct({50, 50, 50}, {40, 40, 40}, {0, 0, 0}),
                         water_box_ct({50, 50, 50}, {30, 35, 40}, {8, -6, 4}),
                         water_box_ct({64, 56, 48}, {45, 45, 40}, {0, 0, 0})};
  for (std::size_t c = 0; c < std::size(cts); ++c) {
    SCOPED_TRACE("CT " + std::to_string(c));
    const pe::DoseResult from_prepared = engine.compute(cts[c], *prepared);
    const pe::DoseResult from_plan = engine.compute(cts[c], plan);
    ASSERT_GT(from_prepared.max_dose_gy, 0.0);
    EXPECT_TRUE(bitwise_equal(from_prepared.dose_gy, from_plan.dose_gy));
    EXPECT_EQ(from_prepared.fractions, 3);
    EXPECT_EQ(from_prepared.spots, from_plan.spots);
    EXPECT_EQ(from_prepared.beams.size(), 2u);
    EXPECT_EQ(from_prepared.energy.carried_mev, from_plan.energy.carried_mev);
    EXPECT_EQ(from_prepared.timings.plan_preparation_s, 0.0);
    EXPECT_GT(from_plan.timings.plan_preparation_s, 0.0);
    EXPECT_GE(from_plan.timings.dose_ready_s, from_plan.timings.plan_preparation_s);
  }
}

// What compute() would reject whatever the CT is rejected by prepare_plan,
// with the same messages.
TEST(PreparedPlan, ThePlansOwnErrorsComeFromItsPreparation) {
  const pe::DoseEngine engine = make_engine();
  const auto rejected = [&](const IonPlan& plan) { return message_of<protondose::InputError>([&] { engine.prepare_plan(plan); }); };
  IonPlan plan = two_beam_plan();
  plan.beams.clear();
  EXPECT_NE(rejected(plan).find("plan 'prepared' has no beams"), std::string::npos);
  plan = two_beam_plan();
  plan.number_of_fractions = 0;
  EXPECT_NE(rejected(plan).find("NumberOfFractionsPlanned is 0; must be >= 1"), std::string::npos);
  plan = two_beam_plan();
  plan.beams[1].machine_name = "OtherMachine";
  EXPECT_NE(rejected(plan).find("beam 2 'B2': TreatmentMachineName 'OtherMachine'"), std::string::npos);
  plan = two_beam_plan();
  plan.beams[1].layers[1].nominal_energy_mev = 300;
  EXPECT_NE(rejected(plan).find("300"), std::string::npos);
  plan = two_beam_plan();
  protondose::RangeShifter rs;
  rs.id = "RS_3CM";
  rs.water_equivalent_thickness_mm = 34.3;
  plan.beams[0].range_shifters.push_back(rs);
  EXPECT_NE(rejected(plan).find("beam 1 'B1': range shifter 'RS_3CM' has no IsocenterToRangeShifterDistance"),
            std::string::npos);
  plan = two_beam_plan();
  plan.beams[1].layers[1].spots[7].meterset = std::numeric_limits<double>::quiet_NaN();
  // A NaN meterset is not > 0: the spot is left out, as a zero one is.
  EXPECT_NO_THROW(engine.prepare_plan(plan));
  plan.beams[1].layers[1].spots[7].y_mm = std::numeric_limits<double>::infinity();
  plan.beams[1].layers[1].spots[7].meterset = 1;
  EXPECT_NE(rejected(plan).find("beam 2 'B2': spot 7 at (0, inf) mm"), std::string::npos) << rejected(plan);
  plan = two_beam_plan();
  for (IonBeam& b : plan.beams)
    for (auto& layer : b.layers)
      for (auto& spot : layer.spots) spot.meterset = 0;
  EXPECT_NE(rejected(plan).find("no beam has a spot with positive meterset"), std::string::npos);
}

// A prepared plan's tables follow its engine's beam model and options: an
// engine computing another engine's prepared plan is a ConfigError naming it.
TEST(PreparedPlan, FromAnotherEngineIsAConfigErrorNamingThePlan) {
  const pe::DoseEngine preparing = make_engine();
  const pe::DoseEngine other = make_engine();
  const auto prepared = preparing.prepare_plan(two_beam_plan());
  const CtImage ct = water_box_ct({50, 50, 50}, {40, 40, 40}, {0, 0, 0});
  const std::string m = message_of<protondose::ConfigError>([&] { other.compute(ct, *prepared); });
  EXPECT_NE(m.find("plan 'prepared' was prepared by another engine"), std::string::npos) << m;
  EXPECT_GT(preparing.compute(ct, *prepared).max_dose_gy, 0.0);
}

// A setup scenario: the prepared plan shifted gives bitwise the dose of the
// plan shifted (shifted_plan moves its isocentres), keeps the plan's id (its
// spots and tables are shared), and leaves the plan itself as it was.
TEST(PreparedPlan, ShiftedGivesBitwiseTheDoseOfTheShiftedPlanAndKeepsTheId) {
  const pe::DoseEngine engine = make_engine();
  const IonPlan plan = two_beam_plan();
  const auto prepared = engine.prepare_plan(plan);
  const CtImage ct = water_box_ct({50, 50, 50}, {40, 40, 40}, {0, 0, 0});
  const protondose::Vec3 shift{3, -2, 5};
  const auto moved = prepared->shifted(shift);
  EXPECT_EQ(moved->id(), prepared->id());
  const pe::DoseResult from_moved = engine.compute(ct, *moved);
  EXPECT_TRUE(bitwise_equal(from_moved.dose_gy, engine.compute(ct, pe::shifted_plan(plan, shift)).dose_gy));
  const pe::DoseResult from_plan = engine.compute(ct, *prepared);
  EXPECT_TRUE(bitwise_equal(from_plan.dose_gy, engine.compute(ct, plan).dose_gy));
  EXPECT_FALSE(bitwise_equal(from_plan.dose_gy, from_moved.dose_gy));
}
