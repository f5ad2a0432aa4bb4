// protondose-engine-bench: the dose engine on the water cube of da Silva,
// Ansorge & Jena (PMB 60:4777, 2015) — 256³ mm of water at 1 mm, a parallel
// beam, 33 × 33 spots at 3 mm × 20 layers from 118.12 to 172.51 MeV (21,780
// spots, random weights 90–100), 1 mm rays, dose on the 1 mm CT grid — built
// in memory (no DICOM), computed by a warm engine: one warm-up, then the median
// of repeated runs, per stage. A benchmark measures; it asserts nothing.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/core/host_timeline.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"
#include "protondose/physics/range_energy.h"

namespace pd = protondose;
namespace pe = protondose::engine;

namespace {

/// FNV-1a (64 bit) of the bytes of a float array: a digest for comparing the
/// doses of two builds bitwise without writing them out.
std::uint64_t fnv1a_64(const std::vector<float>& values) {
  std::uint64_t h = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (std::size_t i = 0; i < values.size() * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

/// Water box of side `side_mm` at `voxel_mm`, centred on the origin (HFS).
pd::CtImage water_cube(double side_mm, double voxel_mm) {
  pd::Grid3 grid;
  const int n = static_cast<int>(std::lround(side_mm / voxel_mm));
  grid.size = {n, n, n};
  grid.spacing_mm = {voxel_mm, voxel_mm, voxel_mm};
  const double first = -side_mm / 2 + voxel_mm / 2;
  grid.origin_mm = {first, first, first};
  pd::CtImage ct;
  ct.hu = pd::Volume<float>(grid, 0.0f);
  ct.patient_position = "HFS";
  return ct;
}

/// The paper's plan: one parallel beam along +y (gantry 0) through the cube's
/// centre, `layers` energies equally spaced in CSDA range between the two
/// energies, a square spot grid, meterset uniform in [90, 100) × 1e-3 MU.
pd::IonPlan cube_plan(int spots_per_side, double spot_spacing_mm, int layers, double e_low_mev,
                      double e_high_mev, const std::string& machine, unsigned seed) {
  pd::IonBeam beam;
  beam.number = 1;
  beam.name = "cube";
  beam.machine_name = machine;
  beam.vsad_x_mm = std::numeric_limits<double>::infinity();  // parallel beam
  beam.vsad_y_mm = std::numeric_limits<double>::infinity();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> weight(0.090, 0.100);
  const double r_low = pd::physics::csda_range_mm(e_low_mev), r_high = pd::physics::csda_range_mm(e_high_mev);
  const double half = (spots_per_side - 1) * spot_spacing_mm / 2;
  for (int l = 0; l < layers; ++l) {
    pd::EnergyLayer layer;
    const double range = r_high - (r_high - r_low) * l / std::max(1, layers - 1);  // highest first
    layer.nominal_energy_mev = pd::physics::energy_from_csda_range_mev(range);
    for (int j = 0; j < spots_per_side; ++j)
      for (int i = 0; i < spots_per_side; ++i)
        layer.spots.push_back({-half + i * spot_spacing_mm, -half + j * spot_spacing_mm, weight(rng)});
    beam.layers.push_back(layer);
  }
  pd::IonPlan plan;
  plan.label = "water cube";
  plan.beams.push_back(beam);
  return plan;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"protondose-engine-bench: the water cube of da Silva et al. (2015) through the warm dose engine"};
  std::string backend = "cpu", machine = "DCPT_ProBeam_v5";
  int repetitions = 5, threads = 0;
  double side_mm = 256, voxel_mm = 1, ray_pitch_mm = 1, depth_step_mm = 1;
  bool halo = true;
  app.add_option("--backend", backend, "cpu | gpu | gpu-gather")->capture_default_str();
  app.add_option("--machine", machine, "Beam model name or folder")->capture_default_str();
  app.add_option("--repetitions", repetitions, "Timed runs after one warm-up (median reported)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--side-mm", side_mm, "Side of the water cube (mm)")->capture_default_str();
  app.add_option("--voxel-mm", voxel_mm, "CT and dose voxel (mm)")->capture_default_str();
  app.add_option("--ray-pitch", ray_pitch_mm, "Ray spacing at the isocentre plane (mm)")->capture_default_str();
  app.add_option("--depth-step", depth_step_mm, "BEV slice thickness (mm)")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0 = all)")->capture_default_str();
  app.add_flag("!--no-halo", halo, "Leave out the nuclear halo");
  bool timeline = false;
  app.add_flag("--timeline", timeline,
               "Print the host timeline of the last run (protondose/core/host_timeline.h: when the host "
               "threads reach the points between the GPU stages)");
  bool separable = true;
  app.add_flag("!--scatter-only", separable,
               "Scatter every slice (no separable passes for uniform-sigma slices): the paper's method as is");
  bool tensor_cores = true;
  app.add_flag("!--tile-scatter", tensor_cores,
               "Scatter on the paper's shared-memory tile design instead of the tensor cores");
  int tensor_core_min_radius_px = protondose::kTensorCoreMinRadiusPx;
  app.add_option("--tensor-core-min-radius", tensor_core_min_radius_px,
                 "Smallest kernel radius (px) scattered on the tensor cores; smaller ones on the tile scatter")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (const char* level = std::getenv("PROTONDOSE_LOG_LEVEL")) spdlog::set_level(spdlog::level::from_str(level));
  try {
    pe::DoseEngineOptions options;
    options.backend = pe::parse_backend(backend);
    options.ray_pitch_mm = ray_pitch_mm;
    options.depth_step_mm = depth_step_mm;
    options.threads = threads;
    options.nuclear_halo = halo;
    options.separable_uniform_slices = separable;
    options.tensor_core_scatter = tensor_cores;
    options.tensor_core_min_radius_px = tensor_core_min_radius_px;
    options.spot_size_policy = pd::physics::SpotSizePolicy::kBeamModel;
    const pd::CtImage ct = water_cube(side_mm, voxel_mm);
    const pd::IonPlan plan = cube_plan(33, 3.0, 20, 118.12, 172.51, "", 2015u);
    pe::DoseEngine engine(pd::physics::load_machine(machine), pd::physics::default_hu_curve(), options);
    std::printf("water cube %.0f mm at %.2f mm (%d^3 voxels), %zu spots in %zu layers, backend %s, halo %s, %s\n",
                side_mm, voxel_mm, ct.hu.grid.size[0], plan.spot_count(), plan.beams[0].layers.size(), backend.c_str(),
                halo ? "on" : "off", separable ? "uniform-sigma slices separable" : "scatter only");
    std::printf("scatter: %s\n", tensor_cores ? "tensor cores" : "tile scatter (paper)");
    // The first call pays the context, the allocations and the depth-dose cache.
    const pe::DoseResult cold = engine.compute(ct, plan);
    // The warm engine on a prepared CT (converted once, kept on the device)
    // and a prepared plan (checked and converted once; on a GPU its spots and
    // tables stay in device memory): the basis, plan in device memory
    // to dose in device memory. Between its runs, the same plan given as an
    // IonPlan, prepared in each call, as compute(ct, plan) does.
    const std::shared_ptr<const pe::PreparedCt> prepared = engine.prepare(ct);
    const std::shared_ptr<const pe::PreparedPlan> prepared_plan = engine.prepare_plan(plan);
    engine.compute(*prepared, *prepared_plan);
    engine.compute(*prepared, plan);
    struct Series {
      std::vector<double> total, ready, setup, rays, layers, ks, halo, resample, checks, download;
      double max_dose = 0;
      std::uint64_t digest = 0;
      void add(const pe::DoseResult& result) {
        const pe::StageTimings& t = result.timings;
        total.push_back(t.total_s);
        ready.push_back(t.dose_ready_s);
        setup.push_back(t.beam_setup_s + t.plan_preparation_s);
        rays.push_back(t.ray_tracing_s);
        layers.push_back(t.layer_images_s);
        ks.push_back(t.superposition_s);
        halo.push_back(t.nuclear_halo_s);
        resample.push_back(t.resampling_s);
        checks.push_back(t.checks_s);
        download.push_back(t.download_s);
        max_dose = result.max_dose_gy;
      }
    } from_prepared_plan, from_ion_plan;
    for (int r = 0; r < repetitions; ++r) {
      const bool last = r + 1 == repetitions;
      if (timeline && last) pd::HostTimeline::start();
      const pe::DoseResult result = engine.compute(*prepared, *prepared_plan);
      if (timeline && last) pd::HostTimeline::stop();
      if (last) from_prepared_plan.digest = fnv1a_64(result.dose_gy.data);  // 0.07 s for a 256³ dose: once
      from_prepared_plan.add(result);
      const pe::DoseResult per_call = engine.compute(*prepared, plan);
      if (last) from_ion_plan.digest = fnv1a_64(per_call.dose_gy.data);
      from_ion_plan.add(per_call);
    }
    const auto ms = [](const std::vector<double>& v) { return 1e3 * median(v); };
    std::printf("| backend | dose ready (ms) | total (ms) | beam setup | rays | layer images | superposition | halo | "
                "resample | checks | download | max dose (Gy) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    // Hundredths of a ms for the GPU's stages: the changes measured on the
    // water cube are often 0.05 ms, below a printed tenth.
    const auto row = [&](const char* what, const Series& x) {
      std::printf("| %s%s | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.4g |\n",
                  backend.c_str(), what, ms(x.ready), ms(x.total), ms(x.setup), ms(x.rays), ms(x.layers), ms(x.ks),
                  ms(x.halo), ms(x.resample), ms(x.checks), ms(x.download), x.max_dose);
    };
    row("", from_prepared_plan);
    row(", plan prepared in each call", from_ion_plan);
    std::printf("median of %d warm runs on a prepared CT and a prepared plan, and as many of the plan prepared in "
                "each call (its preparation counted in dose ready and beam setup), alternately (wall clock by "
                "stage, host timers, each stage synchronised); first call %.1f ms incl. HU conversion %.1f ms and "
                "CUDA context; CT preparation %.1f ms, plan preparation %.2f ms\n"
                "dose digest %016llx (FNV-1a of the last run's float dose: equal digests, bitwise equal doses); "
                "plan prepared in each call: dose digest %016llx\n",
                repetitions, 1e3 * cold.timings.total_s, 1e3 * cold.timings.hu_conversion_s,
                1e3 * prepared->conversion_s, 1e3 * prepared_plan->preparation_s(),
                static_cast<unsigned long long>(from_prepared_plan.digest),
                static_cast<unsigned long long>(from_ion_plan.digest));
    if (timeline) {
      std::size_t dropped = 0;
      std::vector<pd::HostTimelineMark> marks = pd::HostTimeline::marks(&dropped);
      // In time order: the GPU executor's device marks come in at its end.
      std::stable_sort(marks.begin(), marks.end(),
                       [](const pd::HostTimelineMark& a, const pd::HostTimelineMark& b) { return a.us < b.us; });
      std::printf("host timeline of the last run (µs from the start of compute; thread 0 computes; gpu: where "
                  "the GPU reached a point of its streams, within its launch latency):\n");
      double previous_us = 0;
      for (const pd::HostTimelineMark& m : marks) {
        if (m.thread == pd::kDeviceThread)
          std::printf("%10.1f  (+%7.1f)  gpu %s\n", m.us, m.us - previous_us, m.what);
        else
          std::printf("%10.1f  (+%7.1f)  t%d  %s\n", m.us, m.us - previous_us, m.thread, m.what);
        previous_us = m.us;
      }
      if (dropped > 0) std::printf("(%zu marks past the record's capacity not kept)\n", dropped);
    }
    return 0;
  } catch (const pd::Error& e) {
    std::cerr << "protondose-engine-bench: [" << pd::category_name(e.category()) << "] " << e.what() << "\n";
    return pd::exit_code(e.category());
  }
}
