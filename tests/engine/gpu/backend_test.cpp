// The oracle ladder for the whole engine: the GPU backends against the CPU
// backend on one heterogeneous case (shared/docs/style.md). Skips with a
// message where no GPU is usable (CPU-only builds, CI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <memory>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"

#include "../engine_cases.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;

namespace {

using protondose::engine::testing::heterogeneous_ct;
using protondose::engine::testing::kVariants;
using protondose::engine::testing::two_beam_plan;
using protondose::engine::testing::Variant;

pe::DoseResult compute(pe::Backend backend, const Variant& v = kVariants[0]) {
  const pe::DoseEngineOptions o = protondose::engine::testing::variant_options(backend, v);
  const protondose::IonPlan plan = protondose::engine::testing::variant_plan(v);
  const pe::DoseEngine engine(protondose::physics::load_machine("DCPT_ProBeam_v5"),
                              protondose::physics::default_hu_curve(), o);
  const pe::DoseResult r = engine.compute(heterogeneous_ct(), plan);
  const auto& t = r.timings;
  std::printf("%-10s total %.3f s: HU %.3f, rays %.3f, layers %.3f, KS %.3f, halo %.3f, resample %.3f, checks %.3f "
              "(%s; %zu spots)\n",
              pe::backend_name(backend), t.total_s, t.hu_conversion_s, t.ray_tracing_s, t.layer_images_s,
              t.superposition_s, t.nuclear_halo_s, t.resampling_s, t.checks_s, r.superposition_method.c_str(), r.spots);
  return r;
}

/// A GPU engine with the clinical beam model and otherwise default options.
std::unique_ptr<pe::DoseEngine> default_gpu_engine() {
  pe::DoseEngineOptions o;
  o.backend = pe::Backend::kGpu;
  return std::make_unique<pe::DoseEngine>(protondose::physics::load_machine("DCPT_ProBeam_v5"),
                                          protondose::physics::default_hu_curve(), o);
}

double worst_difference(const protondose::Volume<float>& a, const protondose::Volume<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a.data[i]) - b.data[i]));
  return worst;
}

void expect_matches_cpu(pe::Backend backend) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  static const pe::DoseResult cpu = compute(pe::Backend::kCpu);
  compute(backend);  // warm-up: CUDA context, allocations
  const pe::DoseResult gpu = compute(backend);
  EXPECT_NEAR(gpu.energy.expected_mev / cpu.energy.expected_mev, 1.0, 1e-6);
  EXPECT_NEAR(gpu.energy.deposited_mev / cpu.energy.deposited_mev, 1.0, 1e-5);
  ASSERT_GT(cpu.max_dose_gy, 0.0);
  ASSERT_EQ(cpu.dose_gy.data.size(), gpu.dose_gy.data.size());
  double worst = 0;
  std::size_t above = 0;
  for (std::size_t i = 0; i < cpu.dose_gy.data.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(gpu.dose_gy.data[i]) - cpu.dose_gy.data[i]));
    if (cpu.dose_gy.data[i] > 0.1 * cpu.max_dose_gy) ++above;
  }
  std::printf("%s vs cpu: max |dD| = %.3g of Dmax over %zu voxels (%zu above 10 %%)\n", pe::backend_name(backend),
              worst / cpu.max_dose_gy, cpu.dose_gy.data.size(), above);
  EXPECT_GT(above, 10000u);
  // GPU vs CPU backends: max |ΔD| ≤ 1e-4 of D_max (physics-and-method.md §3).
  EXPECT_LE(worst, 1e-4 * cpu.max_dose_gy);
}

}  // namespace

TEST(EngineBackends, GpuScatterMatchesTheCpuBackend) { expect_matches_cpu(pe::Backend::kGpu); }

class EngineBackendVariants : public ::testing::TestWithParam<int> {};

TEST_P(EngineBackendVariants, GpuScatterMatchesTheCpuBackend) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const Variant& v = kVariants[GetParam()];
  const pe::DoseResult cpu = compute(pe::Backend::kCpu, v);
  const pe::DoseResult gpu = compute(pe::Backend::kGpu, v);
  ASSERT_GT(cpu.max_dose_gy, 0.0);
  ASSERT_EQ(cpu.dose_gy.grid, gpu.dose_gy.grid);
  ASSERT_EQ(cpu.beams.size(), gpu.beams.size());
  const double worst = worst_difference(cpu.dose_gy, gpu.dose_gy);
  std::printf("%s: gpu vs cpu max |dD| = %.3g of Dmax; energy expected %.6g vs %.6g MeV, deposited %.6g vs %.6g MeV\n",
              v.name, worst / cpu.max_dose_gy, gpu.energy.expected_mev, cpu.energy.expected_mev,
              gpu.energy.deposited_mev, cpu.energy.deposited_mev);
  EXPECT_LE(worst, 1e-4 * cpu.max_dose_gy) << v.name;
  // The plan's maximum, after the RBE scale where the variant has one (on the
  // GPU found in the last beam's resampling pass).
  EXPECT_NEAR(gpu.max_dose_gy / cpu.max_dose_gy, 1.0, 1e-4) << v.name;
  EXPECT_EQ(gpu.rbe_factor, cpu.rbe_factor) << v.name;
  EXPECT_NEAR(gpu.energy.deposited_mev / cpu.energy.deposited_mev, 1.0, 1e-5) << v.name;
  for (std::size_t b = 0; b < cpu.beams.size(); ++b) {
    EXPECT_EQ(cpu.beams[b].bev_size, gpu.beams[b].bev_size) << v.name;
    if (v.keep_per_beam) {
      ASSERT_EQ(gpu.beams[b].dose_gy.data.size(), cpu.beams[b].dose_gy.data.size());
      EXPECT_LE(worst_difference(cpu.beams[b].dose_gy, gpu.beams[b].dose_gy), 1e-4 * cpu.max_dose_gy) << v.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EngineBackendVariants,
                         ::testing::Range(0, static_cast<int>(std::size(protondose::engine::testing::kVariants))));

TEST(EngineBackends, PreparedCtStaysWarmAndGivesTheSameDose) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const auto engine = default_gpu_engine();
  const auto ct = engine->prepare(heterogeneous_ct());
  const pe::DoseResult first = engine->compute(*ct, two_beam_plan());
  const pe::DoseResult second = engine->compute(*ct, two_beam_plan());
  EXPECT_EQ(second.timings.hu_conversion_s, 0.0);
  // The KS scatter accumulates with float atomics: not bitwise, but far below 1e-5 of Dmax.
  EXPECT_LE(worst_difference(first.dose_gy, second.dose_gy), 1e-5 * first.max_dose_gy);
  std::printf("warm compute on a prepared CT: %.4f s (first %.4f s)\n", second.timings.total_s, first.timings.total_s);
}
// A beam that misses the patient fails after the trace, while the GPU
// executor's staging threads may still pack its spots (stage_beam_layers):
// the error waits for them (DoseEngine's StagedLayersGuard) instead of
// freeing the spots under them or leaving them waiting, and the same engine
// then computes the next plan as a fresh one does. 29,502 spots in the beam
// that misses, so that the packing outlasts the small CT's trace. (What it
// cannot show: a read of the freed spots, which is silent on the host.)
TEST(EngineBackends, ABeamThatMissesThePatientFailsAndTheEngineGoesOn) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const auto engine = default_gpu_engine();
  const auto ct = engine->prepare(heterogeneous_ct());
  protondose::IonPlan missing = two_beam_plan();
  missing.beams[0].isocenter_mm = {0, 0, 500};  // the field passes beside the CT
  for (auto& layer : missing.beams[0].layers)
    for (int y = -25; y <= 25; ++y)
      for (int x = -25; x <= 25; ++x) layer.spots.push_back({x + 0.5, y + 0.5, 0.01});
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      engine->compute(*ct, missing);
      ADD_FAILURE() << "expected InputError";
    } catch (const protondose::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("meets the patient"), std::string::npos) << e.what();
    }
  }
  const pe::DoseResult after = engine->compute(*ct, two_beam_plan());
  const pe::DoseResult reference = default_gpu_engine()->compute(heterogeneous_ct(), two_beam_plan());
  ASSERT_GT(reference.max_dose_gy, 0.0);
  // The scatter's float atomics: not bitwise, far below 1e-5 of D_max.
  EXPECT_LE(worst_difference(after.dose_gy, reference.dose_gy), 1e-5 * reference.max_dose_gy);
}

// A prepared plan's beams stay in the GPU executor's device memory, their
// spots at the isocentre plane whatever the grid. Computed again, alternately
// on two CTs whose beams' grids differ (the second is narrower along the
// beams: a shorter depth range, a narrower margin, another first ray), and
// again after more beams than the executor keeps (8) went through it, they
// give the dose a fresh engine computes from the plan itself. The two beams'
// spots differ (weights and positions), so that one beam's device copy
// taken for the other's would show; a third beam, last, adds no dose.
TEST(EngineBackends, APreparedPlanKeptInDeviceMemoryGivesTheDoseOfItsPlanOnEveryCt) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  protondose::IonPlan plan = two_beam_plan();
  for (auto& layer : plan.beams[1].layers)
    for (auto& spot : layer.spots) {
      spot.x_mm += 3;
      spot.meterset *= 1.5;
    }
  // And a set-up beam last, which adds no dose: the plan's check then runs
  // after its last beam's (the executor's finish_plan pass).
  protondose::IonBeam setup = plan.beams[0];
  setup.number = 3;
  for (auto& layer : setup.layers)
    for (auto& spot : layer.spots) spot.meterset = 0;
  plan.beams.push_back(setup);
  const protondose::CtImage cts[] = {heterogeneous_ct(),
                                     pt::ct_from({80, 90, 72}, {2, 2, 2}, {-79, -89, -71}, pt::heterogeneous_hu)};
  const pe::DoseResult reference[] = {default_gpu_engine()->compute(cts[0], plan),
                                      default_gpu_engine()->compute(cts[1], plan)};
  const auto engine = default_gpu_engine();
  const auto prepared = engine->prepare_plan(plan);
  const std::shared_ptr<const pe::PreparedCt> prepared_cts[] = {engine->prepare(cts[0]), engine->prepare(cts[1])};
  const auto expect_reference = [&](int c, const char* what) {
    const pe::DoseResult r = engine->compute(*prepared_cts[c], *prepared);
    ASSERT_GT(reference[c].max_dose_gy, 0.0);
    // The scatter's float atomics: not bitwise, far below 1e-5 of D_max.
    EXPECT_LE(worst_difference(r.dose_gy, reference[c].dose_gy), 1e-5 * reference[c].max_dose_gy)
        << what << ", CT " << c;
    EXPECT_EQ(r.timings.plan_preparation_s, 0.0);
  };
  for (int round = 0; round < 2; ++round)
    for (int c = 0; c < 2; ++c) expect_reference(c, round == 0 ? "first round" : "second round");
  std::vector<std::shared_ptr<const pe::PreparedPlan>> others;
  for (int p = 1; p <= 5; ++p) {
    protondose::IonPlan other = plan;
    for (auto& beam : other.beams)
      for (auto& layer : beam.layers)
        for (auto& spot : layer.spots) spot.y_mm += p;
    others.push_back(engine->prepare_plan(other));
    engine->compute(*prepared_cts[0], *others.back());
  }
  expect_reference(0, "after 10 other beams");
  expect_reference(1, "after 10 other beams");
}

TEST(EngineBackends, GpuGatherMatchesTheCpuBackend) { expect_matches_cpu(pe::Backend::kGpuGather); }

// Homogeneous water and a parallel beam: every slice's σ-map is uniform, so the
// GPU runs the slices as separable passes (SuperpositionOptions::
// separable_uniform_slices) — the same sum as the CPU oracle's scatter.
TEST(EngineBackends, UniformSlicesOfAWaterPhantomRunSeparableAndMatchTheCpuBackend) {
  std::string why;
  if (!pe::gpu_backend_usable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const protondose::CtImage ct =
      pt::ct_from({60, 80, 60}, {2, 2, 2}, {-59, -79, -59}, [](const protondose::Vec3&) { return 0.0; });  // water
  protondose::IonPlan plan;
  plan.label = "water, parallel beam";
  plan.beams.push_back(pt::square_field_beam(1, 0, {110.0, 125.0, 140.0}, 15, 5, 0.02));
  // Parallel: every ray sees the same water.
  plan.beams[0].vsad_x_mm = plan.beams[0].vsad_y_mm = std::numeric_limits<double>::infinity();
  auto run = [&](pe::Backend backend) {
    pe::DoseEngineOptions o;
    o.backend = backend;
    o.ray_pitch_mm = 2;
    o.depth_step_mm = 2;
    return pe::DoseEngine(protondose::physics::load_machine("DCPT_ProBeam_v5"),
                          protondose::physics::default_hu_curve(), o)
        .compute(ct, plan);
  };
  const pe::DoseResult cpu = run(pe::Backend::kCpu);
  const pe::DoseResult gpu = run(pe::Backend::kGpu);
  ASSERT_EQ(gpu.beams.size(), 1u);
  std::printf("water, parallel beam: %zu of %zu stack slices separable\n", gpu.beams[0].separable_slices,
              gpu.beams[0].stack_slices);
  EXPECT_GT(gpu.beams[0].separable_slices, gpu.beams[0].stack_slices / 2) << "the uniform slices were not split off";
  EXPECT_EQ(cpu.beams[0].separable_slices, 0u);
  ASSERT_GT(cpu.max_dose_gy, 0.0);
  const double worst = worst_difference(cpu.dose_gy, gpu.dose_gy);
  std::printf("water, parallel beam: gpu vs cpu max |dD| = %.3g of Dmax\n", worst / cpu.max_dose_gy);
  EXPECT_LE(worst, 1e-4 * cpu.max_dose_gy);
}
