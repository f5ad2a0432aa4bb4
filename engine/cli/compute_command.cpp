// `protondose compute --ct DIR --plan FILE --out FILE.dcm [...]`: the dose of
// an RT Ion Plan on a CT, written as RT Dose (plus MetaImage and a JSON
// summary on request). The engine is described in docs/engine.md.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend_choice.h"
#include "gpu_start.h"
#include "command_registry.h"
#include "protondose/compare/png.h"
#include "protondose/compare/render.h"
#include "protondose/compare/resample.h"
#include "protondose/core/error.h"
#include "protondose/core/metaimage.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/batch_dicom_io.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/nuclear_halo.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"

namespace {

namespace pe = protondose::engine;

struct ComputeArgs {
  std::string ct_dir;
  std::string plan_path;
  std::string machine;
  std::string hu_curve;
  std::optional<double> grid_mm;
  std::string backend;
  bool per_beam = false;
  std::string out_path;
  std::string mhd_path;
  bool json = false;
  std::optional<double> rbe;
  bool dose_to_medium = false;
  std::string halo_model = protondose::physics::halo_model_name(protondose::physics::kDefaultHaloModel);
  std::string scattering_model =
      protondose::physics::scattering_power_model_name(protondose::physics::ScatteringPowerModel::kFermiRossiHighland);
  double ray_pitch_mm = 1.0;
  double depth_step_mm = 1.0;
  std::string png_dir;
};

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// An output whose folder does not exist fails before the computation, not after.
void require_output_folder(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder))
    throw protondose::IoError(option + " " + path + ": the folder '" + folder.string() + "' does not exist");
}

// Dose over CT on the central axial, coronal and sagittal slices of the dose
// grid: a colour wash from 10 % of the maximum up, over the CT (HU −1000 … 1000).
std::vector<std::string> write_dose_figures(const std::string& folder, const protondose::CtImage& ct,
                                            const protondose::Volume<float>& dose_gy, double max_dose_gy) {
  namespace compare = protondose::compare;
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw protondose::IoError("--png " + folder + ": cannot create the folder (" + ec.message() + ")");
  const protondose::Grid3& g = dose_gy.grid;
  const protondose::Volume<float> ct_on_dose_grid =
      ct.hu.grid == g ? ct.hu : compare::resample_trilinear(ct.hu, g);
  const compare::Background background{&ct_on_dose_grid, -1000.0, 1000.0};
  std::vector<std::string> written;
  for (compare::SlicePlane plane :
       {compare::SlicePlane::kAxial, compare::SlicePlane::kCoronal, compare::SlicePlane::kSagittal}) {
    const int axis = plane == compare::SlicePlane::kAxial ? 2 : (plane == compare::SlicePlane::kCoronal ? 1 : 0);
    const int index = g.size[axis] / 2;
    const std::string name = compare::plane_name(plane);
    std::string title = "PLAN DOSE (GY) " + name + " SLICE " + std::to_string(index);
    for (char& c : title) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const std::string path = (fs::path(folder) / ("dose_over_ct_" + name + ".png")).string();
    compare::write_png(path, compare::render_dose_slice(background, dose_gy, max_dose_gy, 0.1, plane, index, title));
    written.push_back(path);
  }
  return written;
}

std::string beam_dose_path(const std::string& out, int beam_number) {
  const std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + "_beam" + std::to_string(beam_number) + p.extension().string()))
      .string();
}

void run_compute(const ComputeArgs& a, protondose::cli::CliContext& ctx) {
  if (ctx.quiet) spdlog::set_level(spdlog::level::warn);
  // With --json, stdout carries only the summary: the log goes to stderr.
  if (a.json) spdlog::set_default_logger(spdlog::stderr_color_mt("protondose-compute"));
  // Options first: a bad command line fails before any file is read.
  const pe::Backend backend = protondose::cli::choose_backend(a.backend);
  require_output_folder(a.out_path, "--out");
  require_output_folder(a.mhd_path, "--mhd");
  protondose::cli::GpuStart gpu_start(backend != pe::Backend::kCpu ? std::vector<int>{0} : std::vector<int>{});
  auto t_stage = Clock::now();
  protondose::CtImage ct = protondose::dicom::read_ct_series(a.ct_dir);
  const double read_ct_s = seconds_since(t_stage);
  t_stage = Clock::now();
  // Shared with `protondose batch` (batch_dicom_io.h): PatientPosition from the
  // plan when the CT lacks it, and the FrameOfReference check.
  const protondose::IonPlan plan = pe::dicom_io::read_plan_for_ct(a.plan_path, a.ct_dir, ct);
  const double read_plan_s = seconds_since(t_stage);

  const std::string machine_name = a.machine.empty() ? pe::plan_machine_name(plan, a.plan_path) : a.machine;
  protondose::physics::BeamModel machine = protondose::physics::load_machine(machine_name);
  protondose::physics::HuCurve hu = a.hu_curve.empty() ? protondose::physics::default_hu_curve()
                                                       : protondose::physics::load_hu_curve_csv(a.hu_curve);
  if (a.hu_curve.empty()) spdlog::info("HU curve: the shipped default ({})", hu.source());

  pe::DoseEngineOptions o;
  o.backend = backend;
  o.output_spacing_mm = a.grid_mm;
  o.keep_per_beam = a.per_beam;
  o.rbe_factor = a.rbe;
  o.quantity = a.dose_to_medium ? pe::DoseQuantity::kDoseToMedium : pe::DoseQuantity::kDoseToWater;
  {
    using protondose::physics::HaloModel;
    bool known = false;
    for (HaloModel m : {HaloModel::kMcsquareFit, HaloModel::kSoukup2005})
      if (a.halo_model == protondose::physics::halo_model_name(m)) {
        o.halo_model = m;
        known = true;
      }
    if (!known)
      throw protondose::ConfigError("--halo-model '" + a.halo_model + "' is unknown; accepted: mcsquare-fit, soukup-2005");
  }
  {
    using protondose::physics::ScatteringPowerModel;
    bool known = false;
    for (ScatteringPowerModel m : {ScatteringPowerModel::kFermiRossiHighland, ScatteringPowerModel::kDifferentialHighland,
                                   ScatteringPowerModel::kDifferentialMoliere})
      if (a.scattering_model == protondose::physics::scattering_power_model_name(m)) {
        o.scattering_model = m;
        known = true;
      }
    if (!known)
      throw protondose::ConfigError("--scattering-model '" + a.scattering_model +
                                    "' is unknown; accepted: fermi-rossi-highland, differential-highland, "
                                    "differential-moliere");
  }
  o.ray_pitch_mm = a.ray_pitch_mm;
  o.depth_step_mm = a.depth_step_mm;
  // --machine is the user's explicit choice for every beam, whatever the plan names.
  o.require_machine_name_match = a.machine.empty();
  if (!a.machine.empty())
    for (const auto& beam : plan.beams)
      if (!beam.machine_name.empty() && beam.machine_name != machine.name()) {
        spdlog::warn("--machine {}: beam {} names TreatmentMachineName '{}'; computing with '{}' as asked",
                     a.machine, beam.number, beam.machine_name, machine.name());
      }
  // The CT conversion is host work: it runs while the GPU may still be
  // starting. The engine needs only the GPU's context (created first), so it
  // is made and the CT uploaded while the GPU thread still loads kernels.
  const std::shared_ptr<const pe::PreparedCt> prepared = pe::prepare_ct(ct, hu, o);
  t_stage = Clock::now();
  const pe::DoseEngine engine(std::move(machine), std::move(hu), o);
  engine.preload(*prepared);
  const double engine_setup_s = seconds_since(t_stage);
  t_stage = Clock::now();
  const protondose::GpuStartTimings gpu_started = gpu_start.wait();
  const double gpu_start_wait_s = seconds_since(t_stage);
  t_stage = Clock::now();
  pe::DoseResult r = engine.compute(*prepared, plan);
  r.timings.hu_conversion_s = prepared->conversion_s;
  r.timings.total_s += prepared->conversion_s;
  const double compute_s = seconds_since(t_stage);
  t_stage = Clock::now();

  // RT Dose holds the plan dose: every fraction (DoseSummationType PLAN).
  const double fractions = r.fractions;
  // Scaled in place: at 1 mm the volume is ~100 MB, not worth a copy.
  protondose::Volume<float> plan_dose = std::move(r.dose_gy);
  for (float& v : plan_dose.data) v = static_cast<float>(v * fractions);
  protondose::dicom::RtDoseWriteOptions w;
  w.plan = &plan;
  w.ct = &ct;
  if (r.rbe_factor) {
    w.dose_type = protondose::dicom::DoseTypeOption::kEffective;
    w.rbe_factor = r.rbe_factor;
  }
  protondose::dicom::write_rt_dose(a.out_path, plan_dose, w);
  std::vector<std::string> written{a.out_path};
  if (a.per_beam) {
    for (const pe::BeamDose& b : r.beams) {
      protondose::Volume<float> d = b.dose_gy;
      for (float& v : d.data) v = static_cast<float>(v * fractions);
      protondose::dicom::RtDoseWriteOptions wb = w;
      wb.summation = protondose::dicom::DoseSummationOption::kBeam;
      wb.referenced_beam_number = b.beam_number;
      const std::string path = beam_dose_path(a.out_path, b.beam_number);
      protondose::dicom::write_rt_dose(path, d, wb);
      written.push_back(path);
    }
  }
  if (!a.mhd_path.empty()) {
    protondose::write_metaimage(a.mhd_path, plan_dose);
    written.push_back(a.mhd_path);
  }
  if (!a.png_dir.empty() && r.max_dose_gy > 0) {
    for (const std::string& path : write_dose_figures(a.png_dir, ct, plan_dose, r.max_dose_gy * fractions))
      written.push_back(path);
  }
  const double write_s = seconds_since(t_stage);

  nlohmann::json j;
  j["ct"] = a.ct_dir;
  j["plan"] = a.plan_path;
  j["machine"] = engine.machine().name();
  j["hu_curve"] = engine.hu_curve().source();
  j["backend"] = pe::backend_name(r.backend);
  j["superposition_method"] = r.superposition_method;
  j["dose_quantity"] = pe::dose_quantity_name(r.quantity);
  j["dose_type"] = r.rbe_factor ? "EFFECTIVE" : "PHYSICAL";
  if (r.rbe_factor) j["rbe_factor"] = *r.rbe_factor;
  j["fractions"] = r.fractions;
  j["max_dose_gy_per_fraction"] = r.max_dose_gy;
  j["max_dose_gy_plan"] = r.max_dose_gy * fractions;
  j["spots"] = r.spots;
  j["beams"] = nlohmann::json::array();
  for (const pe::BeamDose& b : r.beams) {
    j["beams"].push_back({{"number", b.beam_number},
                          {"name", b.beam_name},
                          {"layers", b.layers},
                          {"spots", b.spots},
                          {"bev_size_cols_rows_slices", b.bev_size},
                          {"superposition_pixels", b.bev_pixels},
                          {"stack_slices", b.stack_slices},
                          {"separable_slices", b.separable_slices},
                          {"energy_relative_difference", b.energy.relative_difference()}});
  }
  const auto& g = plan_dose.grid;
  j["dose_grid"] = {{"size", g.size}, {"spacing_mm", g.spacing_mm}, {"origin_mm", g.origin_mm},
                    {"voxels", g.voxel_count()}};
  j["energy_balance"] = {{"carried_mev", r.energy.carried_mev},
                         {"expected_mev", r.energy.expected_mev},
                         {"deposited_mev", r.energy.deposited_mev},
                         {"relative_difference", r.energy.relative_difference()},
                         {"tolerance", r.energy_balance_tolerance}};
  const auto& t = r.timings;
  j["timings_s"] = {{"hu_conversion", t.hu_conversion_s}, {"beam_setup", t.beam_setup_s},
                    {"ray_tracing", t.ray_tracing_s},     {"layer_images", t.layer_images_s},
                    {"superposition", t.superposition_s}, {"nuclear_halo", t.nuclear_halo_s},
                    {"resampling", t.resampling_s},       {"checks", t.checks_s},
                    {"download", t.download_s},           {"dose_ready", t.dose_ready_s},
                    {"total", t.total_s}};
  // The process around the engine: DICOM in, the GPU's start (on its own
  // thread, during the reading, the CT conversion and the engine's set-up
  // with the CT's upload: "gpu_start_wait" is what they did not hide), the
  // engine's compute() (without the CT conversion, which is in timings_s)
  // and the outputs written.
  j["process_timings_s"] = {{"read_ct", read_ct_s},       {"read_plan", read_plan_s},
                            {"gpu_context", gpu_started.context_s},
                            {"gpu_kernels", gpu_started.kernels_s},
                            {"engine_setup", engine_setup_s},
                            {"gpu_start_wait", gpu_start_wait_s},
                            {"engine", compute_s},        {"write_outputs", write_s}};
  j["outputs"] = written;
  if (a.json) {
    std::cout << j.dump(2) << "\n";
  } else if (!ctx.quiet) {
    std::printf("dose: %s (%s, %s), max %.4g Gy per fraction x %d fraction(s); %zu spots in %zu beam(s); %.2f s "
                "(KS %.2f s)\n",
                a.out_path.c_str(), pe::backend_name(r.backend), pe::dose_quantity_name(r.quantity), r.max_dose_gy,
                r.fractions, r.spots, r.beams.size(), t.total_s, t.superposition_s);
  }
}

void add_compute(CLI::App& app, protondose::cli::CliContext& ctx) {
  auto a = std::make_shared<ComputeArgs>();
  CLI::App* cmd = app.add_subcommand("compute", "Compute the dose of an RT Ion Plan on a CT (RT Dose out)");
  cmd->add_option("--ct", a->ct_dir, "Folder with the CT series")->required();
  cmd->add_option("--plan", a->plan_path, "RT Ion Plan file")->required();
  cmd->add_option("--machine", a->machine,
                  "Beam model: a shipped machine name or a machine folder/file (default: the plan's "
                  "TreatmentMachineName)");
  cmd->add_option("--hu-curve", a->hu_curve, "HU calibration CSV (HU, rsp, mass_density_g_cm3); default: shipped");
  cmd->add_option("--grid", a->grid_mm, "Output dose grid spacing (mm) over the CT extent; default: the CT grid");
  cmd->add_option("--backend", a->backend, "gpu | gpu-gather | cpu (default: gpu when usable, else cpu)");
  cmd->add_flag("--per-beam", a->per_beam, "Also write one RT Dose per beam (<out>_beam<N>.dcm)");
  cmd->add_option("--out", a->out_path, "RT Dose output file (plan dose: all fractions)")->required();
  cmd->add_option("--mhd", a->mhd_path, "Also write the plan dose as MetaImage (.mhd + .raw)");
  cmd->add_option("--png", a->png_dir, "Also write the plan dose over the CT on the central slices (PNG) here");
  cmd->add_flag("--json", a->json, "Print a JSON summary (timings by stage, spots, voxels, max dose, backend)");
  cmd->add_option("--rbe", a->rbe, "Multiply by a constant RBE (e.g. 1.1); RT Dose labelled EFFECTIVE");
  cmd->add_flag("--dose-to-medium", a->dose_to_medium, "Report dose to medium instead of dose to water");
  cmd->add_option("--halo-model", a->halo_model,
                  "Nuclear halo: mcsquare-fit (default) | soukup-2005 (Soukup et al., PMB 50:5089, 2005)")
      ->capture_default_str();
  cmd->add_option("--scattering-model", a->scattering_model,
                  "Multiple Coulomb scattering power: fermi-rossi-highland (default) | differential-highland | "
                  "differential-moliere (Gottschalk 2010). With --halo-model soukup-2005 the pair that matches the "
                  "Monte Carlo spot width at 70-230 MeV (docs/validation/lateral-spread.md)")
      ->capture_default_str();
  cmd->add_option("--ray-pitch", a->ray_pitch_mm, "BEV ray spacing at the isocentre plane (mm)")->capture_default_str();
  cmd->add_option("--depth-step", a->depth_step_mm, "BEV slice thickness (mm)")->capture_default_str();
  cmd->callback([a, &ctx]() { run_compute(*a, ctx); });
}

const protondose::cli::CommandRegistration kComputeRegistration{"compute", &add_compute};

}  // namespace
