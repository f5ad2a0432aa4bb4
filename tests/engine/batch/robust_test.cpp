#include "protondose/engine/robust.h"

#include <gtest/gtest.h>

#include <set>

#include "batch_case.h"
#include "expect_error.h"
#include "protondose/core/error.h"
#include "protondose/physics/beam_model.h"

namespace pe = protondose::engine;
using protondose::testing::message_of;

namespace {

pe::DoseEngineOptions fast_engine() {
  pe::DoseEngineOptions o;
  o.ray_pitch_mm = 2;
  o.depth_step_mm = 2;
  o.threads = 2;
  return o;
}

const protondose::physics::BeamModel& machine() {
  static const protondose::physics::BeamModel m = protondose::physics::load_machine("DCPT_ProBeam_v5");
  return m;
}

}  // namespace

TEST(RobustScenarios, TheStandardSetIsNominalPlusSixShiftsTimesThreeRanges) {
  const auto s = pe::standard_scenarios(3.0, 3.5);
  ASSERT_EQ(s.size(), 21u);
  EXPECT_EQ(s[0].name, "nominal");
  EXPECT_EQ(s[0].shift_mm, (protondose::Vec3{0, 0, 0}));
  EXPECT_EQ(s[0].rsp_scale, 1.0);
  std::set<std::string> names;
  std::set<std::tuple<double, double, double, double>> combos;
  for (const auto& sc : s) {
    names.insert(sc.name);
    combos.insert({sc.shift_mm[0], sc.shift_mm[1], sc.shift_mm[2], sc.rsp_scale});
  }
  EXPECT_EQ(names.size(), 21u);
  EXPECT_EQ(combos.size(), 21u);
  EXPECT_TRUE(combos.count({0, -3, 0, 1.035}));
  EXPECT_TRUE(combos.count({0, 0, 3, 0.965}));
  EXPECT_TRUE(names.count("+x3mm_range+3.5%"));
  EXPECT_NE(message_of<protondose::ConfigError>([] { pe::standard_scenarios(-1, 3.5); }).find("--setup-mm"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::ConfigError>([] { pe::standard_scenarios(3, 60); }).find("--range-pct"),
            std::string::npos);
}

TEST(RobustScenarios, ScenarioFileNeedsTheNominalFirstAndNamesBadLines) {
  const auto dir = batch_test::fresh_dir();
  batch_test::write_text(dir / "ok.csv", "# setups\nname,x_mm,y_mm,z_mm,range_pct\nnom,0,0,0,0\nleft,-5,0,0,2\n");
  const auto s = pe::load_scenarios_csv((dir / "ok.csv").string());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].shift_mm, (protondose::Vec3{-5, 0, 0}));
  EXPECT_DOUBLE_EQ(s[1].rsp_scale, 1.02);
  batch_test::write_text(dir / "first.csv", "name,x_mm,y_mm,z_mm,range_pct\nleft,-5,0,0,0\n");
  EXPECT_NE(message_of<protondose::InputError>([&] { pe::load_scenarios_csv((dir / "first.csv").string()); })
                .find("first.csv, line 2: the first scenario is the nominal"),
            std::string::npos);
  batch_test::write_text(dir / "num.csv", "name,x_mm,y_mm,z_mm,range_pct\nnom,0,0,0,0\nb,1,2,x,0\n");
  EXPECT_NE(message_of<protondose::InputError>([&] { pe::load_scenarios_csv((dir / "num.csv").string()); })
                .find("num.csv, line 3: column z_mm 'x' is not a number"),
            std::string::npos);
  batch_test::write_text(dir / "dup.csv", "name,x_mm,y_mm,z_mm,range_pct\nnom,0,0,0,0\nnom,1,0,0,0\n");
  EXPECT_NE(message_of<protondose::InputError>([&] { pe::load_scenarios_csv((dir / "dup.csv").string()); })
                .find("scenario name 'nom' appears twice"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::IoError>([&] { pe::load_scenarios_csv((dir / "none.csv").string()); })
                .find("none.csv"),
            std::string::npos);
}

TEST(Robust, ZeroShiftAndUnitScaleReproduceTheNominalDoseBitwise) {
  const protondose::CtImage ct = batch_test::tiny_ct();
  const protondose::IonPlan plan = batch_test::tiny_plan(100);
  pe::RobustOptions o;
  o.engine = fast_engine();
  const std::vector<pe::RobustScenario> scenarios{{"nominal", {0, 0, 0}, 1.0}, {"zero", {0.0, -0.0, 0.0}, 1.0}};
  std::vector<std::vector<float>> doses;
  const pe::RobustResult r = pe::run_robust(machine(), protondose::physics::default_hu_curve(), ct, plan, scenarios, o,
                                            [&](std::size_t, const protondose::Volume<float>& d) { doses.push_back(d.data); });
  ASSERT_EQ(doses.size(), 2u);
  const pe::DoseEngine engine(machine(), protondose::physics::default_hu_curve(), fast_engine());
  const pe::DoseResult direct = engine.compute(ct, plan);
  ASSERT_GT(direct.max_dose_gy, 0.0);
  EXPECT_EQ(doses[0], direct.dose_gy.data);
  EXPECT_EQ(doses[1], direct.dose_gy.data);
  // The same through the batch's own scenario hooks: a zero shift and a unit scale change nothing.
  const pe::DoseEngine scaled(machine(), pe::scaled_hu_curve(protondose::physics::default_hu_curve(), 1.0), fast_engine());
  EXPECT_EQ(scaled.compute(ct, pe::shifted_plan(plan, {0, 0, 0})).dose_gy.data, direct.dose_gy.data);
}

TEST(Robust, ALateralShiftOfAWaterPhantomMovesTheDoseByExactlyThatShift) {
  // Beam from gantry 0 along +y; the shift is along x, one and two 4 mm voxels.
  // The box is wide in x so that its lateral faces stay beyond the nuclear halo
  // in every position (in a narrower box the halo sees the face move: 1.5 % of
  // the maximum at 8 mm from a 40 mm half-width).
  const protondose::CtImage ct = batch_test::tiny_ct(240);
  const protondose::IonPlan plan = batch_test::tiny_plan(100);
  const pe::DoseEngine engine(machine(), protondose::physics::default_hu_curve(), fast_engine());
  const protondose::Volume<float> nominal = engine.compute(ct, plan).dose_gy;
  const auto& g = nominal.grid;
  ASSERT_EQ(g.spacing_mm[0], 4.0);
  float dmax = 0;
  for (float v : nominal.data) dmax = std::max(dmax, v);
  ASSERT_GT(dmax, 0.0f);
  for (int n : {1, 2, -1}) {
    // The patient moves +x by n voxels: the isocentre, and the dose, move by −n voxels in the CT.
    const protondose::Volume<float> moved = engine.compute(ct, pe::shifted_plan(plan, {4.0 * n, 0, 0})).dose_gy;
    ASSERT_EQ(moved.grid, g);
    std::size_t compared = 0;
    double worst = 0;
    for (int k = 0; k < g.size[2]; ++k)
      for (int j = 0; j < g.size[1]; ++j)
        for (int i = 0; i < g.size[0]; ++i) {
          const int src = i + n;
          if (src < 0 || src >= g.size[0]) continue;
          const float expected = nominal.at(src, j, k);
          if (expected > 0.01f * dmax) ++compared;
          worst = std::max(worst, static_cast<double>(std::abs(moved.at(i, j, k) - expected)));
        }
    EXPECT_GT(compared, 100u);
    // Equal to float rounding: the BEV geometry is the same relative to the
    // isocentre, and the CT under it is the same water.
    EXPECT_LE(worst, 1e-5 * dmax) << "shift " << n << " voxel(s)";
  }
}

TEST(Robust, MinimumAndMaximumBracketTheNominalEverywhere) {
  const protondose::CtImage ct = batch_test::tiny_ct();
  const protondose::IonPlan plan = batch_test::tiny_plan(100);
  pe::RobustOptions o;
  o.engine = fast_engine();
  std::vector<pe::RobustScenario> scenarios = pe::standard_scenarios(4.0, 3.5);
  scenarios.resize(9);  // nominal and ±x with the three range errors: enough to widen the band
  const pe::RobustResult r =
      pe::run_robust(machine(), protondose::physics::default_hu_curve(), ct, plan, scenarios, o);
  ASSERT_EQ(r.seconds.size(), 9u);
  std::size_t wider = 0;
  for (std::size_t v = 0; v < r.nominal_gy.data.size(); ++v) {
    ASSERT_LE(r.min_gy.data[v], r.nominal_gy.data[v]) << v;
    ASSERT_LE(r.nominal_gy.data[v], r.max_gy.data[v]) << v;
    if (r.max_gy.data[v] - r.min_gy.data[v] > 1e-3f * r.max_gy.data[v]) ++wider;
  }
  EXPECT_GT(wider, 50u);  // the scenarios really differ
}

TEST(Robust, TheFirstScenarioMustBeTheNominal) {
  pe::RobustOptions o;
  o.engine = fast_engine();
  const std::string msg = message_of<protondose::ConfigError>([&] {
    pe::run_robust(machine(), protondose::physics::default_hu_curve(), batch_test::tiny_ct(), batch_test::tiny_plan(100),
                   {{"up", {0, 0, 0}, 1.035}}, o);
  });
  EXPECT_NE(msg.find("the first scenario ('up') must be the nominal"), std::string::npos) << msg;
}

TEST(Robust, DvhBandIsTheMinimumNominalAndMaximumOverScenarios) {
  const std::vector<nlohmann::json> per_scenario{
      {{"PTV", {{"d98_gy", 1.9}, {"d95_gy", 1.95}, {"d50_gy", 2.0}, {"d2_gy", 2.05}, {"mean_gy", 2.0}}}},
      {{"PTV", {{"d98_gy", 1.7}, {"d95_gy", 1.80}, {"d50_gy", 2.0}, {"d2_gy", 2.10}, {"mean_gy", 1.98}}}},
      {{"PTV", {{"d98_gy", 1.95}, {"d95_gy", 1.97}, {"d50_gy", 2.01}, {"d2_gy", 2.02}, {"mean_gy", 2.01}}}}};
  const nlohmann::json band = pe::dvh_band(per_scenario);
  EXPECT_EQ(band["PTV"]["d98_gy"], (nlohmann::json{{"min", 1.7}, {"nominal", 1.9}, {"max", 1.95}}));
  EXPECT_EQ(band["PTV"]["d2_gy"]["max"], 2.10);
  EXPECT_EQ(band["PTV"]["mean_gy"]["min"], 1.98);
  const nlohmann::json nominal_only = {{"PTV", {{"d98_gy", 1}, {"d95_gy", 1}, {"d50_gy", 1}, {"d2_gy", 1}, {"mean_gy", 1}}}};
  const std::vector<nlohmann::json> missing{nominal_only, nlohmann::json::object()};
  const std::string msg = message_of<protondose::InternalError>([&] { pe::dvh_band(missing); });
  EXPECT_NE(msg.find("scenario 1 has no DVH of 'PTV'"), std::string::npos) << msg;
}
