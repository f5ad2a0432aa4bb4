// `run_robust` with several GPU workers against one GPU worker: the workers'
// own engines on one device or on two, sharing the prepared CTs, give the
// one-worker doses. Skips with a message where no GPU is usable (CPU-only
// builds, CI), and the two-device case where fewer than two GPUs exist.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../engine_cases.h"
#include "protondose/engine/robust.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::Volume;

namespace {

/// A 120 × 120 × 80 mm water box at 2 mm with a bone rod along z in the beam's path.
protondose::CtImage water_box_with_bone() {
  return pt::ct_from({60, 60, 40}, {2, 2, 2}, {-59, -59, -39}, [](const protondose::Vec3& p) {
    return (p[0] - 6) * (p[0] - 6) + (p[1] + 20) * (p[1] + 20) <= 64 ? 1000.0 : 0.0;
  });
}

/// One beam from gantry 0, three layers of 7 × 7 spots on a 5 mm grid.
protondose::IonPlan three_layer_plan() {
  protondose::IonPlan plan;
  plan.label = "robust-gpu";
  plan.beams.push_back(pt::square_field_beam(1, 0, {100.0, 110.0, 120.0}, 15, 5, 0.05));
  return plan;
}

struct RobustRun {
  pe::RobustResult result;
  std::vector<Volume<float>> doses;  ///< on_scenario's, by index
};

RobustRun run_on_gpus(const std::vector<int>& gpu_devices, int workers) {
  static const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  pe::RobustOptions o;
  o.engine.backend = pe::Backend::kGpu;
  o.engine.ray_pitch_mm = 2;
  o.engine.depth_step_mm = 2;
  o.workers = workers;
  o.gpu_devices = gpu_devices;
  RobustRun run;
  run.result = pe::run_robust(machine, protondose::physics::default_hu_curve(), water_box_with_bone(),
                              three_layer_plan(), pe::standard_scenarios(3.0, 3.5), o,
                              [&](std::size_t, const Volume<float>& dose) { run.doses.push_back(dose); });
  std::map<int, int> per_device;
  for (int d : run.result.devices) ++per_device[d];
  std::printf("%d worker(s) on %zu listed device(s): %zu scenarios in %.3f s;", workers, gpu_devices.size(),
              run.result.scenarios.size(), run.result.total_s);
  for (const auto& [device, count] : per_device) std::printf(" device %d: %d", device, count);
  std::printf("\n");
  return run;
}

double worst_difference(const Volume<float>& a, const Volume<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a.data[i]) - b.data[i]));
  return worst;
}

/// The KS scatter accumulates with float atomics, so two runs are not bitwise
/// equal; they agree far below 1e-6 of the maximum dose.
void expect_same_doses(const RobustRun& reference, const RobustRun& test, const std::string& what) {
  const auto& ref = reference.result;
  float dmax = 0;
  for (float v : ref.max_gy.data) dmax = std::max(dmax, v);
  ASSERT_GT(dmax, 0.0f);
  ASSERT_NE(ref.min_gy.data, ref.max_gy.data) << "the scenarios do not differ: the comparison could not fail";
  const double tolerance = 1e-6 * dmax;
  ASSERT_EQ(test.result.nominal_gy.grid, ref.nominal_gy.grid) << what;
  EXPECT_LE(worst_difference(test.result.nominal_gy, ref.nominal_gy), tolerance) << what << ": nominal";
  EXPECT_LE(worst_difference(test.result.min_gy, ref.min_gy), tolerance) << what << ": minimum";
  EXPECT_LE(worst_difference(test.result.max_gy, ref.max_gy), tolerance) << what << ": maximum";
  ASSERT_EQ(test.doses.size(), reference.doses.size()) << what;
  for (std::size_t i = 0; i < reference.doses.size(); ++i)
    EXPECT_LE(worst_difference(test.doses[i], reference.doses[i]), tolerance)
        << what << ": scenario " << i << " (" << ref.scenarios[i].name << ")";
}

}  // namespace

TEST(RobustGpuWorkers, TwoWorkersOnOneGpuMatchOneWorker) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const RobustRun one = run_on_gpus({}, 1);
  const RobustRun two = run_on_gpus({0, 0}, 2);
  EXPECT_EQ(two.result.workers, 2);
  EXPECT_EQ(one.result.devices, std::vector<int>(one.result.scenarios.size(), 0));
  EXPECT_EQ(two.result.devices, std::vector<int>(two.result.scenarios.size(), 0));
  expect_same_doses(one, two, "2 workers on GPU 0");
}

TEST(RobustGpuWorkers, TwoWorkersOnTwoGpusMatchOneWorker) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const int devices = protondose::gpu_device_count();
  if (devices < 2) GTEST_SKIP() << "needs two GPUs; " << devices << " usable here";
  const RobustRun one = run_on_gpus({}, 1);
  const RobustRun two = run_on_gpus({0, 1}, 2);
  EXPECT_EQ(two.result.workers, 2);
  // Handed out dynamically: which worker takes how many scenarios is not fixed.
  for (int d : two.result.devices) EXPECT_TRUE(d == 0 || d == 1) << d;
  expect_same_doses(one, two, "2 workers on GPUs 0 and 1");
}
