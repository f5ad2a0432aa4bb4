// `protondose robust --ct DIR --plan FILE --out-dir DIR [...]`: the plan's
// dose under setup and range error scenarios (21 by default), the voxel-wise
// minimum and maximum dose as RT Dose, and per structure the DVH band
// (docs/batch.md, "Robustness").
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "gpu_start.h"
#include "command_registry.h"
#include "protondose/compare/dvh.h"
#include "protondose/compare/png.h"
#include "protondose/compare/render.h"
#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/batch_dicom_io.h"
#include "protondose/engine/robust.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"

namespace {

namespace pe = protondose::engine;
namespace fs = std::filesystem;
using nlohmann::json;

struct RobustArgs {
  std::string ct_dir;
  std::string plan_path;
  std::string out_dir;
  std::string structures;
  std::string machine;
  std::string hu_curve;
  std::string backend;  // empty: gpu when usable, else cpu (backend_choice.h)
  std::optional<double> grid_mm;
  double setup_mm = 3.0;
  double range_pct = 3.5;
  std::string scenarios_file;
  bool per_scenario = false;
  double ray_pitch_mm = 1.0;
  double depth_step_mm = 1.0;
  std::string gpus;                    // --gpus all|0,1: GPU scenario workers
  std::optional<int> workers_per_gpu;  // with --gpus (default kGpuWorkersPerDevice)
  std::optional<int> workers;          // without --gpus (default: 1 on the CPU, kGpuWorkersPerDevice on a GPU)
};

/// Scenario workers per GPU by default. Several engines on one GPU keep it
/// busy through each other's host work and stage synchronisations: plan03's
/// 21 scenarios on an H100, once warm with writing included (3–4 runs each,
/// each executor in its own stream): 40–42 scenarios/s with 1 worker, 50–52
/// with 2, 52–61 with 3, 53–57 with 4 (docs/benchmarks-batch.md). Each worker
/// plans its stacks for its share of the device memory.
constexpr int kGpuWorkersPerDevice = 3;

/// The scenario workers and their devices from --gpus / --workers-per-gpu /
/// --workers, as `protondose batch` places them (worker w on the w-th listed
/// device, mod their number). ConfigError for contradictory options; the
/// --backend cpu check comes before the device lookup, so `--gpus 0 --backend
/// cpu` is a config error also where no GPU exists.
void place_workers(const RobustArgs& a, pe::RobustOptions& ro) {
  if (a.gpus.empty()) {
    if (a.workers_per_gpu)
      throw protondose::ConfigError("--workers-per-gpu " + std::to_string(*a.workers_per_gpu) +
                                    " needs --gpus; use --workers N for the CPU backend");
    ro.workers = a.workers.value_or(ro.engine.backend == pe::Backend::kCpu ? 1 : kGpuWorkersPerDevice);
    return;
  }
  if (ro.engine.backend == pe::Backend::kCpu)
    throw protondose::ConfigError("--gpus " + a.gpus +
                                  " with --backend cpu: the CPU backend runs on no GPU; use --workers N instead");
  if (a.workers)
    throw protondose::ConfigError("--workers " + std::to_string(*a.workers) +
                                  " with --gpus " + a.gpus + ": GPU workers are --workers-per-gpu K per listed device");
  const int per_gpu = a.workers_per_gpu.value_or(kGpuWorkersPerDevice);
  if (per_gpu < 1) throw protondose::ConfigError("--workers-per-gpu " + std::to_string(per_gpu) + ": need at least 1");
  ro.gpu_devices = pe::parse_gpu_list(a.gpus, protondose::gpu_device_count());
  ro.workers = static_cast<int>(ro.gpu_devices.size()) * per_gpu;
}

/// Scenarios per second once warm: the scenarios after the first (which pays
/// the engine's start, the CT conversion and upload) over the time from the
/// first's delivery to every RT Dose written; 0 with fewer than two.
double warm_rate(const std::vector<double>& delivered_s, double outputs_written_s) {
  if (delivered_s.size() < 2) return 0.0;
  const double span_s = outputs_written_s - delivered_s.front();
  return span_s > 0 ? static_cast<double>(delivered_s.size() - 1) / span_s : 0.0;
}

void run_robust_command(const RobustArgs& a, protondose::cli::CliContext& ctx) {
  spdlog::set_level(spdlog::level::warn);
  // Options first: a bad scenario set fails before the CT is read.
  const std::vector<pe::RobustScenario> scenarios =
      a.scenarios_file.empty() ? pe::standard_scenarios(a.setup_mm, a.range_pct) : pe::load_scenarios_csv(a.scenarios_file);
  pe::DoseEngineOptions eo;
  // --gpus asks for GPU workers: the gpu backend unless --backend names another.
  eo.backend = !a.gpus.empty() && a.backend.empty() ? pe::Backend::kGpu : protondose::cli::choose_backend(a.backend);
  eo.output_spacing_mm = a.grid_mm;
  eo.ray_pitch_mm = a.ray_pitch_mm;
  eo.depth_step_mm = a.depth_step_mm;
  eo.require_machine_name_match = a.machine.empty();
  pe::RobustOptions ro;
  ro.engine = eo;
  place_workers(a, ro);
  ro.validate();
  // The GPUs start while the DICOM files are read.
  std::vector<int> start_devices = ro.gpu_devices;
  if (start_devices.empty() && eo.backend != pe::Backend::kCpu) start_devices.push_back(eo.gpu_device);
  protondose::cli::GpuStart gpu_start(start_devices);

  protondose::CtImage ct = protondose::dicom::read_ct_series(a.ct_dir);
  const protondose::IonPlan plan = pe::dicom_io::read_plan_for_ct(a.plan_path, a.ct_dir, ct);
  const protondose::physics::BeamModel machine =
      protondose::physics::load_machine(a.machine.empty() ? pe::plan_machine_name(plan, a.plan_path) : a.machine);
  const protondose::physics::HuCurve hu = a.hu_curve.empty() ? protondose::physics::default_hu_curve()
                                                             : protondose::physics::load_hu_curve_csv(a.hu_curve);
  std::optional<protondose::dicom::StructureSet> structures;
  if (!a.structures.empty()) structures = protondose::dicom::read_rt_structure_set(a.structures);
  fs::create_directories(a.out_dir);

  protondose::dicom::RtDoseWriteOptions w;
  w.plan = &plan;
  w.ct = &ct;
  // DVH metrics per scenario and structure; masks rasterised once on the dose grid.
  std::map<std::string, protondose::Volume<std::uint8_t>> masks;
  json skipped = json::object();
  std::vector<json> per_scenario_metrics;
  // Cumulative DVHs per ROI and scenario at one bin width per ROI (the nominal
  // maximum / 200), for the DVH-band figure.
  std::map<std::string, std::vector<protondose::compare::Dvh>> curves;
  std::map<std::string, double> bin_width_gy;
  const bool progress = !ctx.quiet && ::isatty(STDERR_FILENO);  // quiet when piped
  // One RT Dose into --out-dir; callable from several threads at once.
  const auto write_dose = [&](const std::string& file, const std::string& description,
                              const protondose::Volume<float>& dose) {
    protondose::dicom::RtDoseWriteOptions options = w;
    options.series_description = "protondose robust: " + description;
    protondose::dicom::write_rt_dose((fs::path(a.out_dir) / file).string(), dose, options);
  };
  auto on_scenario = [&](std::size_t i, const protondose::Volume<float>& dose) {
    // The nominal is final once delivered: written now, on the delivering
    // thread, while the workers compute the next scenarios.
    if (i == 0) write_dose("dose_nominal.dcm", "nominal", dose);
    if (a.per_scenario) write_dose("scenario_" + scenarios[i].name + ".dcm", scenarios[i].name, dose);
    json m = json::object();
    if (structures) {
      if (i == 0)
        for (const auto& roi : structures->rois) {
          try {
            masks.emplace(roi.name, protondose::dicom::rasterize_roi(*structures, roi.name, dose.grid));
          } catch (const protondose::InputError& e) {
            skipped[roi.name] = e.what();
          }
        }
      for (const auto& [name, mask] : masks) {
        protondose::compare::DvhOptions dvh_options;
        if (i > 0) dvh_options.bin_width_gy = bin_width_gy[name];
        protondose::compare::Dvh dvh = protondose::compare::compute_dvh(dose, mask, name, dvh_options);
        if (i == 0) bin_width_gy[name] = dvh.max_gy > 0 ? dvh.max_gy / 200.0 : 1.0;
        m[name] = pe::dicom_io::dvh_json(dvh);
        curves[name].push_back(std::move(dvh));
      }
    }
    per_scenario_metrics.push_back(m);
    if (progress) std::fprintf(stderr, "\rscenario %zu/%zu %-40.40s", i + 1, scenarios.size(), scenarios[i].name.c_str());
  };
  const auto t_run = std::chrono::steady_clock::now();
  const pe::RobustResult r = pe::run_robust(machine, hu, ct, plan, scenarios, ro, on_scenario);
  if (progress) std::fprintf(stderr, "\n");

  // The minimum and maximum are final only now: written side by side.
  {
    auto min_written = std::async(std::launch::async, [&] {
      write_dose("dose_min.dcm", "voxel-wise minimum over scenarios", r.min_gy);
    });
    write_dose("dose_max.dcm", "voxel-wise maximum over scenarios", r.max_gy);
    min_written.get();
  }
  // From the start of run_robust (the same instant as its delivered_s' zero,
  // to the microsecond) to the last RT Dose on disk.
  const double outputs_written_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count();

  json scen = json::array();
  for (std::size_t i = 0; i < scenarios.size(); ++i)
    scen.push_back({{"name", scenarios[i].name},
                    {"shift_mm", scenarios[i].shift_mm},
                    {"rsp_scale", scenarios[i].rsp_scale},
                    {"compute_s", r.seconds[i]},
                    {"worker", r.worker_indices[i]},
                    {"delivered_at_s", r.delivered_s[i]},
                    {"device", r.devices[i]},
                    {"engine_timings_s", {{"dose_ready", r.timings[i].dose_ready_s},
                                          {"ray_tracing", r.timings[i].ray_tracing_s},
                                          {"layer_images", r.timings[i].layer_images_s},
                                          {"superposition", r.timings[i].superposition_s},
                                          {"nuclear_halo", r.timings[i].nuclear_halo_s},
                                          {"resampling", r.timings[i].resampling_s},
                                          {"download", r.timings[i].download_s}}},
                    {"structures", per_scenario_metrics[i]}});
  const json band = pe::dvh_band(per_scenario_metrics);
  if (!curves.empty()) {
    // The band as a figure: per ROI the lower envelope solid, the upper dashed.
    std::vector<protondose::compare::Dvh> lower, upper;
    for (const auto& [name, c] : curves) {
      auto [lo, hi] = pe::dicom_io::dvh_envelope(c);
      lower.push_back(std::move(lo));
      upper.push_back(std::move(hi));
    }
    protondose::compare::write_png((fs::path(a.out_dir) / "dvh_band.png").string(),
                                   protondose::compare::render_dvh(lower, upper, "DVH BAND OVER SCENARIOS"));
  }
  // The devices the workers ran on (the engine's device without --gpus; none on the CPU).
  std::vector<int> used_devices = ro.gpu_devices;
  if (used_devices.empty() && eo.backend != pe::Backend::kCpu) used_devices.push_back(eo.gpu_device);
  const json out{{"ct", a.ct_dir},
                 {"plan", a.plan_path},
                 {"scenario_count", scenarios.size()},
                 {"backend", pe::backend_name(eo.backend)},
                 {"workers", r.workers},
                 {"gpu_devices", used_devices},
                 {"total_s", r.total_s},
                 {"scenarios_per_s", r.total_s > 0 ? static_cast<double>(scenarios.size()) / r.total_s : 0.0},
                 {"outputs_written_s", outputs_written_s},
                 // Once warm (warm_rate): the scenarios after the first, writing included.
                 {"warm_scenarios_per_s", warm_rate(r.delivered_s, outputs_written_s)},
                 {"dvh_band", band},
                 {"structures_skipped", skipped},
                 {"scenarios", scen}};
  protondose::write_text_atomically((fs::path(a.out_dir) / "robust.json").string(), out.dump(2) + "\n");
  if (!ctx.quiet)
    std::printf("robust: %zu scenarios in %.2f s (%.3g scenarios/s; %.3g/s once warm); min/max/nominal RT Dose and "
                "robust.json in %s\n",
                scenarios.size(), r.total_s, scenarios.size() / std::max(r.total_s, 1e-9), warm_rate(r.delivered_s, outputs_written_s), a.out_dir.c_str());
}

void add_robust(CLI::App& app, protondose::cli::CliContext& ctx) {
  auto a = std::make_shared<RobustArgs>();
  CLI::App* cmd = app.add_subcommand("robust", "Dose under setup and range error scenarios: min/max dose, DVH bands");
  cmd->add_option("--ct", a->ct_dir, "Folder with the CT series")->required();
  cmd->add_option("--plan", a->plan_path, "RT Ion Plan file")->required();
  cmd->add_option("--out-dir", a->out_dir, "Folder for dose_{nominal,min,max}.dcm and robust.json")->required();
  cmd->add_option("--structures", a->structures, "RT Structure Set: DVH band per structure");
  cmd->add_option("--machine", a->machine, "Beam model (default: the plan's TreatmentMachineName)");
  cmd->add_option("--hu-curve", a->hu_curve, "HU calibration CSV (default: shipped)");
  cmd->add_option("--backend", a->backend, "gpu | gpu-gather | cpu (default: gpu when usable, else cpu)");
  cmd->add_option("--grid", a->grid_mm, "Output dose grid spacing (mm); default: the CT grid");
  cmd->add_option("--setup-mm", a->setup_mm, "Setup shift along each patient axis (mm)")->capture_default_str();
  cmd->add_option("--range-pct", a->range_pct, "Range error (RSP scaled by 1 +- pct/100)")->capture_default_str();
  cmd->add_option("--scenarios", a->scenarios_file, "CSV name,x_mm,y_mm,z_mm,range_pct (first row: nominal)");
  cmd->add_flag("--per-scenario", a->per_scenario, "Also write each scenario's dose (scenario_<name>.dcm)");
  cmd->add_option("--ray-pitch", a->ray_pitch_mm, "BEV ray spacing at the isocentre plane (mm)")->capture_default_str();
  cmd->add_option("--depth-step", a->depth_step_mm, "BEV slice thickness (mm)")->capture_default_str();
  cmd->add_option("--gpus", a->gpus, "GPU scenario workers: all | 0,1 | 0 (device indices)");
  cmd->add_option("--workers-per-gpu", a->workers_per_gpu, "Scenario workers sharing each GPU of --gpus (default 3)");
  cmd->add_option("--workers", a->workers, "Scenario workers without --gpus (default: 1 on the CPU backend, 3 on a GPU)");
  cmd->callback([a, &ctx]() { run_robust_command(*a, ctx); });
}

const protondose::cli::CommandRegistration kRobustRegistration{"robust", &add_robust};

}  // namespace
