#include "protondose/engine/robust.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <set>
#include <stdexcept>
#include <thread>

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

// ---- several scenario workers -------------------------------------------------

namespace {

/// What one run_robust delivered: the scenario doses in the order on_scenario saw them.
struct Delivered {
  pe::RobustResult result;
  std::vector<std::size_t> order;             ///< on_scenario's indices, call by call
  std::vector<std::vector<float>> doses;      ///< on_scenario's doses, call by call
  bool all_on_calling_thread = true;
};

Delivered run_with_workers(const std::vector<pe::RobustScenario>& scenarios, int workers, int engine_threads) {
  pe::RobustOptions o;
  o.engine = fast_engine();
  o.engine.threads = engine_threads;
  o.workers = workers;
  Delivered d;
  const std::thread::id caller = std::this_thread::get_id();
  d.result = pe::run_robust(machine(), protondose::physics::default_hu_curve(), batch_test::tiny_ct(),
                            batch_test::tiny_plan(100), scenarios, o,
                            [&](std::size_t i, const protondose::Volume<float>& dose) {
                              d.order.push_back(i);
                              d.doses.push_back(dose.data);
                              if (std::this_thread::get_id() != caller) d.all_on_calling_thread = false;
                            });
  return d;
}

/// Runs f (which must throw E) on another thread and returns E's message. A
/// run that has not returned after `limit` is a deadlock: the test reports it
/// and ends the process, since a hung thread can be neither joined nor cancelled.
template <class E, class F>
std::string message_without_hanging(F f, std::chrono::seconds limit = std::chrono::seconds(300)) {
  std::promise<std::string> message;
  std::future<std::string> done = message.get_future();
  std::thread runner([&] { message.set_value(message_of<E>(f)); });
  if (done.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "run_robust has not returned after %lld s: deadlock; ending the test process\n",
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  runner.join();
  return done.get();
}

/// Nominal, ±x and ±y with the three range errors: 15 scenarios on 3 prepared CTs.
std::vector<pe::RobustScenario> fifteen_scenarios() {
  std::vector<pe::RobustScenario> s = pe::standard_scenarios(4.0, 3.5);
  s.resize(15);
  return s;
}

}  // namespace

TEST(RobustWorkers, TwoAndThreeWorkersGiveTheOneWorkerDosesBitwiseInScenarioOrder) {
  const std::vector<pe::RobustScenario> scenarios = fifteen_scenarios();
  const Delivered one = run_with_workers(scenarios, 1, 2);
  ASSERT_EQ(one.doses.size(), scenarios.size());
  ASSERT_GT(*std::max_element(one.result.max_gy.data.begin(), one.result.max_gy.data.end()), 0.0f);
  ASSERT_NE(one.result.min_gy.data, one.result.max_gy.data);  // the scenarios differ: the comparison can fail
  std::vector<std::size_t> in_order(scenarios.size());
  for (std::size_t i = 0; i < in_order.size(); ++i) in_order[i] = i;
  EXPECT_EQ(one.order, in_order);
  EXPECT_EQ(one.result.workers, 1);
  EXPECT_EQ(one.result.worker_indices, std::vector<int>(scenarios.size(), 0));
  // Engine threads 0: the workers split the cores (the CPU dose does not depend on the thread count).
  for (int workers : {2, 3}) {
    const Delivered many = run_with_workers(scenarios, workers, 0);
    EXPECT_EQ(many.result.workers, workers);
    EXPECT_EQ(many.order, in_order) << workers << " workers";
    EXPECT_TRUE(many.all_on_calling_thread) << workers << " workers";
    EXPECT_EQ(many.result.nominal_gy.data, one.result.nominal_gy.data) << workers << " workers";
    EXPECT_EQ(many.result.min_gy.data, one.result.min_gy.data) << workers << " workers";
    EXPECT_EQ(many.result.max_gy.data, one.result.max_gy.data) << workers << " workers";
    EXPECT_EQ(many.result.nominal_gy.grid, one.result.nominal_gy.grid);
    ASSERT_EQ(many.doses.size(), one.doses.size());
    for (std::size_t i = 0; i < one.doses.size(); ++i)
      EXPECT_EQ(many.doses[i], one.doses[i]) << "scenario " << i << " (" << scenarios[i].name << "), " << workers
                                             << " workers";
    EXPECT_EQ(many.result.seconds.size(), scenarios.size());
    EXPECT_EQ(many.result.timings.size(), scenarios.size());
    EXPECT_EQ(many.result.devices, std::vector<int>(scenarios.size(), -1));  // the CPU backend
    ASSERT_EQ(many.result.worker_indices.size(), scenarios.size());
    for (int w : many.result.worker_indices) EXPECT_TRUE(w >= 0 && w < workers) << w;
  }
}

TEST(RobustWorkers, MoreWorkersThanScenariosStartOnePerScenario) {
  const std::vector<pe::RobustScenario> scenarios{{"nominal", {0, 0, 0}, 1.0}, {"+x", {4, 0, 0}, 1.0}};
  const Delivered d = run_with_workers(scenarios, 5, 1);
  EXPECT_EQ(d.result.workers, 2);
  EXPECT_EQ(d.order, (std::vector<std::size_t>{0, 1}));
}

namespace {
/// `workers` scenario workers whose engines use one thread each.
pe::RobustOptions single_threaded_workers(int workers) {
  pe::RobustOptions o;
  o.engine = fast_engine();
  o.engine.threads = 1;
  o.workers = workers;
  return o;
}
}  // namespace

TEST(RobustWorkers, AnExceptionOfOnScenarioPropagatesWithItsMessage) {
  const std::vector<pe::RobustScenario> scenarios = fifteen_scenarios();
  for (int workers : {1, 2, 3}) {
    const pe::RobustOptions o = single_threaded_workers(workers);
    std::vector<std::size_t> order;
    const std::string msg = message_without_hanging<std::runtime_error>([&] {
      pe::run_robust(machine(), protondose::physics::default_hu_curve(), batch_test::tiny_ct(),
                     batch_test::tiny_plan(100), scenarios, o, [&](std::size_t i, const protondose::Volume<float>&) {
                       order.push_back(i);
                       if (i == 4) throw std::runtime_error("the caller gives up at scenario 4");
                     });
    });
    EXPECT_EQ(msg, "the caller gives up at scenario 4") << workers << " workers";
    EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 3, 4})) << workers << " workers";
  }
}

TEST(RobustWorkers, AScenarioTheEngineRejectsPropagatesAsItsTypedError) {
  // A setup "shift" of 1 m moves the isocentre off the CT: no ray of the beam
  // meets the patient, which the engine refuses (InputError).
  std::vector<pe::RobustScenario> scenarios = fifteen_scenarios();
  const std::size_t failing = 6;
  scenarios[failing] = {"off_the_ct", {1000, 0, 0}, 1.0};
  for (int workers : {1, 2, 3}) {
    const pe::RobustOptions o = single_threaded_workers(workers);
    std::vector<std::size_t> order;
    const std::string msg = message_without_hanging<protondose::InputError>([&] {
      pe::run_robust(machine(), protondose::physics::default_hu_curve(), batch_test::tiny_ct(),
                     batch_test::tiny_plan(100), scenarios, o,
                     [&](std::size_t i, const protondose::Volume<float>&) { order.push_back(i); });
    });
    EXPECT_NE(msg.find("no ray of the beam's field meets the patient"), std::string::npos) << workers << ": " << msg;
    // Whatever was delivered before the failure is a prefix in order, never the failed scenario or beyond.
    ASSERT_LE(order.size(), failing) << workers << " workers";
    for (std::size_t k = 0; k < order.size(); ++k) EXPECT_EQ(order[k], k) << workers << " workers";
  }
}

TEST(RobustWorkers, OptionsAreValidatedWithTheOptionNamed) {
  const auto run = [](const pe::RobustOptions& o) {
    pe::run_robust(machine(), protondose::physics::default_hu_curve(), batch_test::tiny_ct(), batch_test::tiny_plan(100),
                   {{"nominal", {0, 0, 0}, 1.0}}, o);
  };
  pe::RobustOptions zero;
  zero.engine = fast_engine();
  zero.workers = 0;
  std::string msg = message_of<protondose::ConfigError>([&] { run(zero); });
  EXPECT_NE(msg.find("--workers 0: need at least 1"), std::string::npos) << msg;

  pe::RobustOptions cpu_with_gpus;
  cpu_with_gpus.engine = fast_engine();
  cpu_with_gpus.gpu_devices = {0};
  msg = message_of<protondose::ConfigError>([&] { run(cpu_with_gpus); });
  EXPECT_NE(msg.find("--gpus"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu backend"), std::string::npos) << msg;

  // Checked before any engine (or GPU) is created, so it holds in a CPU-only build too.
  pe::RobustOptions negative;
  negative.engine = fast_engine();
  negative.engine.backend = pe::Backend::kGpu;
  negative.gpu_devices = {0, -1};
  msg = message_of<protondose::ConfigError>([&] { run(negative); });
  EXPECT_NE(msg.find("--gpus: device index -1 is negative"), std::string::npos) << msg;
}
