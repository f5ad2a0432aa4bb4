#include "protondose/engine/dose_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/engine/bev_grid.h"
#include "protondose/engine/geometry.h"
#include "protondose/engine/ray_trace.h"
#include "protondose/engine/resample.h"
#include "protondose/engine/spot_fluence.h"
#include "protondose/physics/materials.h"
#include "protondose/physics/nuclear_halo.h"
#include "protondose/physics/range_energy.h"
#include "protondose/physics/range_shifter.h"

namespace protondose::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Below this residual energy (MeV) a proton is at the end of its range; the
/// Fermi–Eyges scattering power diverges as pv → 0, so the moments only drift
/// there (the dose beyond is the range-straggling tail, a few % of a mm).
constexpr double kMinScatteringEnergyMev = 1.0;
/// Mass density (g/cm³) below which a sample scatters nothing (outside the CT).
constexpr double kMinScatteringDensityGcm3 = 1e-6;
/// Rough upper bound of the Fermi–Eyges σ at the end of range as a fraction of
/// the range (water, Highland: ≈ 2–2.5 % of R; more behind low-density
/// material, where the lever arm is longer), used only to size the BEV
/// grid's first attempt; a second attempt widens it when the σ-maps need more.
constexpr double kMcsSigmaPerRangeEstimate = 0.05;
/// Host bytes per pixel of a superposition stack: image, σx, σy, output, and
/// the halo share and variance.
constexpr std::size_t kStackBytesPerPixel = 6 * sizeof(float);
/// Spacing (mm of WEPL) of the residual-energy lookup table of a layer.
constexpr double kEnergyTableStepMm = 0.5;
/// Target pitch (mm, isocentre plane) of the coarse grid of the nuclear halo:
/// the halo σ is ≥ 8 mm (nuclear_halo.h), so ≥ 2 coarse pixels.
constexpr double kHaloPitchMm = 4.0;

/// Everything one energy layer needs in the BEV stage.
struct LayerWork {
  const EnergyLayer* layer = nullptr;
  double nominal_energy_mev = 0;
  double mean_energy_mev = 0;
  const physics::CumulativeDepthDose* curve = nullptr;
  double shifter_wet_mm = 0;   ///< WEPL already used up upstream of the patient
  double cutoff_wepl_mm = 0;   ///< pencils stop here (WEPL inside the trace, from its start)
  std::vector<SpotProtons> spots;
  double protons = 0;
  std::optional<double> fwhm_x_mm, fwhm_y_mm;
  physics::ScatteringOptions scattering;
  std::optional<physics::NuclearHalo> halo;  ///< for the energy at the patient surface
  std::vector<double> residual_energy_mev;  ///< at WEPL = i·kEnergyTableStepMm after the shifter
  // Filled per BEV grid:
  int slices = 0;  ///< slices [0, slices) of the cropped trace carry this layer
  std::size_t stack_offset = 0;  ///< first stack slice
  double spread_sigma_x_iso_mm = 0, spread_sigma_y_iso_mm = 0;
  std::vector<double> air_sigma_x_mm, air_sigma_y_mm;  ///< in-air σ at each slice centre

  double energy_at_wepl(double wepl_after_shifter_mm) const {
    const double u = wepl_after_shifter_mm / kEnergyTableStepMm;
    if (u <= 0) return residual_energy_mev.front();
    const std::size_t i = static_cast<std::size_t>(u);
    if (i + 1 >= residual_energy_mev.size()) return residual_energy_mev.back();
    const double f = u - static_cast<double>(i);
    return residual_energy_mev[i] * (1 - f) + residual_energy_mev[i + 1] * f;
  }
};

double sigma_in_air(const physics::BeamModel& m, const LayerWork& L, physics::Axis axis, double depth_mm,
                    physics::SpotSizePolicy policy) {
  const std::optional<double>& fwhm = axis == physics::Axis::kX ? L.fwhm_x_mm : L.fwhm_y_mm;
  // A plan without ScanningSpotSize leaves nothing to override: the model's size is the only one.
  if (policy == physics::SpotSizePolicy::kPlanSpotSizeAtIsocentre && !fwhm)
    policy = physics::SpotSizePolicy::kBeamModel;
  return m.spot_sigma_in_air_mm(L.nominal_energy_mev, axis, depth_mm, policy, fwhm);
}

/// The nuclear halo of a beam: the halo shares of the input pixels are summed
/// into blocks of a coarse BEV grid (pitch ≈ kHaloPitchMm, padded by the widest
/// halo kernel so nothing is clipped), superposed there with the halo σ, and
/// the result is resampled onto the dose grid like the core dose.
/// stack_depth_slice[s]: the BEV slice of stack slice s.
void add_nuclear_halo(const BevGrid& grid, const BeamFrame& frame, const std::vector<int>& stack_depth_slice,
                      const std::vector<float>& halo_image, const std::vector<float>& halo_variance_mm2,
                      Superposer& superposer, double cutoff_sigmas, int threads, Volume<float>& beam_dose) {
  const std::size_t stack_slices = stack_depth_slice.size();
  const std::size_t plane = grid.rays();
  double max_variance = 0;
  for (std::size_t i = 0; i < halo_image.size(); ++i)
    if (halo_image[i] > 0) max_variance = std::max(max_variance, static_cast<double>(halo_variance_mm2[i]));
  if (max_variance <= 0) return;
  const int f = std::max(1, static_cast<int>(std::lround(kHaloPitchMm / grid.pitch_x_mm)));
  const double first_d = grid.depth_mm(0), last_d = grid.depth_mm(grid.slices - 1);
  const double m_min = std::min({grid.magnification_x(first_d), grid.magnification_y(first_d),
                                 grid.magnification_x(last_d), grid.magnification_y(last_d)});
  const int pad = static_cast<int>(std::ceil(cutoff_sigmas * std::sqrt(max_variance) /
                                             (f * std::min(grid.pitch_x_mm, grid.pitch_y_mm) * m_min))) + 1;
  BevGrid hg = grid;
  hg.pitch_x_mm = f * grid.pitch_x_mm;
  hg.pitch_y_mm = f * grid.pitch_y_mm;
  hg.cols = (grid.cols + f - 1) / f + 2 * pad;
  hg.rows = (grid.rows + f - 1) / f + 2 * pad;
  hg.x0_mm = grid.x0_mm + 0.5 * (f - 1) * grid.pitch_x_mm - pad * hg.pitch_x_mm;
  hg.y0_mm = grid.y0_mm + 0.5 * (f - 1) * grid.pitch_y_mm - pad * hg.pitch_y_mm;
  const std::size_t hplane = hg.rays();
  std::vector<float> image(stack_slices * hplane, 0.0f), sx(stack_slices * hplane, 0.0f), sy(stack_slices * hplane, 0.0f);
  const double block = static_cast<double>(f) * f;
  parallel_for_chunks(stack_slices, threads, [&](std::size_t b, std::size_t e, int) {
    std::vector<double> sum(hplane), weighted_variance(hplane);
    for (std::size_t st = b; st < e; ++st) {
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(weighted_variance.begin(), weighted_variance.end(), 0.0);
      const float* hi = halo_image.data() + st * plane;
      const float* hv = halo_variance_mm2.data() + st * plane;
      for (int r = 0; r < grid.rows; ++r)
        for (int c = 0; c < grid.cols; ++c) {
          const std::size_t p = static_cast<std::size_t>(r) * grid.cols + c;
          if (hi[p] <= 0) continue;
          const std::size_t q = static_cast<std::size_t>(r / f + pad) * hg.cols + static_cast<std::size_t>(c / f + pad);
          sum[q] += hi[p];
          weighted_variance[q] += static_cast<double>(hi[p]) * hv[p];
        }
      const double d = grid.depth_mm(stack_depth_slice[st]);
      const double px = hg.pitch_x_mm * hg.magnification_x(d), py = hg.pitch_y_mm * hg.magnification_y(d);
      for (std::size_t q = 0; q < hplane; ++q) {
        if (sum[q] <= 0) continue;
        // Block mean of the dose: the coarse pixel holds the same energy per area.
        image[st * hplane + q] = static_cast<float>(sum[q] / block);
        const double sigma_mm = std::sqrt(weighted_variance[q] / sum[q]);
        sx[st * hplane + q] = static_cast<float>(sigma_mm / px);
        sy[st * hplane + q] = static_cast<float>(sigma_mm / py);
      }
    }
  });
  std::vector<float> out(stack_slices * hplane, 0.0f);
  SuperpositionInput in;
  in.shape = {static_cast<int>(stack_slices), hg.rows, hg.cols};
  in.image = {image.data(), image.size()};
  in.sigma_x_px = {sx.data(), sx.size()};
  in.sigma_y_px = {sy.data(), sy.size()};
  superposer.superpose(in, out.data());
  std::vector<float> halo_bev(hg.pixel_count(), 0.0f);
  for (std::size_t st = 0; st < stack_slices; ++st) {
    float* dst = halo_bev.data() + static_cast<std::size_t>(stack_depth_slice[st]) * hplane;
    const float* src = out.data() + st * hplane;
    for (std::size_t q = 0; q < hplane; ++q) dst[q] += src[q];
  }
  add_bev_to_patient(hg, frame, halo_bev, 1.0, beam_dose, threads);
}

std::string beam_label(const IonBeam& b) {
  std::ostringstream s;
  s << "beam " << b.number;
  if (!b.name.empty()) s << " '" << b.name << "'";
  return s.str();
}

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kCpu: return "cpu";
    case Backend::kGpu: return "gpu";
    case Backend::kGpuGather: return "gpu-gather";
  }
  return "?";
}

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "gpu") return Backend::kGpu;
  if (name == "gpu-gather") return Backend::kGpuGather;
  throw ConfigError("backend '" + name + "' is unknown; accepted: cpu, gpu, gpu-gather");
}

SuperpositionMethod superposition_method(Backend b) {
  switch (b) {
    case Backend::kCpu: return SuperpositionMethod::kCpuReference;
    case Backend::kGpu: return SuperpositionMethod::kGpuScatterTiled;
    case Backend::kGpuGather: return SuperpositionMethod::kGpuGatherExact;
  }
  throw InternalError("superposition_method: unknown backend");
}

bool gpu_backend_usable(std::string* why_not) {
  try {
    make_superposer(SuperpositionMethod::kGpuScatterTiled);
    return true;
  } catch (const UnavailableError& e) {
    if (why_not) *why_not = e.what();
    return false;
  }
}

const char* dose_quantity_name(DoseQuantity q) {
  return q == DoseQuantity::kDoseToWater ? "dose-to-water" : "dose-to-medium";
}

void DoseEngineOptions::validate() const {
  const auto bad = [](const std::string& what, double v, const std::string& range) {
    std::ostringstream m;
    m << "dose engine option " << what << " = " << v << " is outside " << range;
    throw ConfigError(m.str());
  };
  if (!(ray_pitch_mm > 0) || !std::isfinite(ray_pitch_mm)) bad("ray_pitch_mm", ray_pitch_mm, "(0, inf) mm");
  if (gpu_device < 0) bad("gpu_device", gpu_device, "[0, number of CUDA devices)");
  if (!(depth_step_mm > 0) || !std::isfinite(depth_step_mm)) bad("depth_step_mm", depth_step_mm, "(0, inf) mm");
  if (!(cutoff_sigmas > 0) || !(cutoff_sigmas <= 10)) bad("cutoff_sigmas", cutoff_sigmas, "(0, 10]");
  if (!(range_cutoff_factor >= 1) || !(range_cutoff_factor <= 2))
    bad("range_cutoff_factor", range_cutoff_factor, "[1, 2]");
  if (output_spacing_mm && (!(*output_spacing_mm > 0) || !std::isfinite(*output_spacing_mm)))
    bad("output grid spacing (mm)", *output_spacing_mm, "(0, inf) mm");
  if (rbe_factor && (!(*rbe_factor > 0) || !std::isfinite(*rbe_factor))) bad("rbe_factor", *rbe_factor, "(0, inf)");
  if (!(energy_balance_tolerance > 0) || !(energy_balance_tolerance < 1))
    bad("energy_balance_tolerance", energy_balance_tolerance, "(0, 1)");
  if (threads < 0) bad("threads", threads, "[0, inf)");
  if (max_stack_bytes == 0) bad("max_stack_bytes", 0, "[1, inf) bytes");
}

Grid3 output_grid(const Grid3& ct, std::optional<double> spacing_mm) {
  if (!spacing_mm) return ct;
  if (!(*spacing_mm > 0) || !std::isfinite(*spacing_mm)) {
    std::ostringstream m;
    m << "output grid spacing " << *spacing_mm << " mm must be finite and > 0";
    throw ConfigError(m.str());
  }
  Grid3 g = ct;
  const double s = *spacing_mm;
  for (int a = 0; a < 3; ++a) {
    const double extent = ct.size[a] * ct.spacing_mm[a];
    g.size[a] = std::max(1, static_cast<int>(std::ceil(extent / s - 1e-6)));
    g.spacing_mm[a] = s;
  }
  // Same outer face at the start of every axis: the first voxel centre is half a new voxel inside it.
  g.origin_mm = ct.position_mm(-0.5 + 0.5 * s / ct.spacing_mm[0], -0.5 + 0.5 * s / ct.spacing_mm[1],
                               -0.5 + 0.5 * s / ct.spacing_mm[2]);
  return g;
}

void check_dose_values(const Volume<float>& dose, const std::string& what) {
  for (int k = 0; k < dose.grid.size[2]; ++k)
    for (int j = 0; j < dose.grid.size[1]; ++j)
      for (int i = 0; i < dose.grid.size[0]; ++i) {
        const float v = dose.at(i, j, k);
        if (!std::isfinite(v) || v < 0.0f) {
          const Vec3 p = dose.grid.position_mm(i, j, k);
          std::ostringstream m;
          m << what << ": dose " << v << " Gy at voxel (" << i << ", " << j << ", " << k << "), patient ("
            << p[0] << ", " << p[1] << ", " << p[2] << ") mm; every dose must be finite and >= 0";
          throw NumericalError(m.str());
        }
      }
}

DoseEngine::DoseEngine(physics::BeamModel machine, physics::HuCurve hu_curve, DoseEngineOptions options)
    : machine_(std::move(machine)), hu_curve_(std::move(hu_curve)), options_(std::move(options)) {
  options_.validate();
  SuperpositionOptions so;
  so.cutoff_sigmas = options_.cutoff_sigmas;
  so.cpu_threads = options_.threads;
  so.gpu_device = options_.gpu_device;
  superposer_ = make_superposer(superposition_method(options_.backend), so);
}

DoseEngine::~DoseEngine() = default;

const physics::CumulativeDepthDose& DoseEngine::depth_dose(double e) const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  auto it = depth_dose_cache_.find(e);
  if (it == depth_dose_cache_.end()) it = depth_dose_cache_.emplace(e, machine_.depth_dose(e)).first;
  return it->second;
}

namespace {

/// State of one compute() call shared by its beams.
struct PlanContext {
  const CtImage* ct = nullptr;
  Volume<float> rsp;
  Volume<float> density;
  Volume<float> out_rsp;      ///< on the output grid (for the energy balance)
  Volume<float> out_density;
  PatientPosition position = PatientPosition::kHfs;
};

/// Host bytes one superposition stack may take: max_stack_bytes, and on a GPU
/// backend no more than fits in 80 % of the device's free memory now (checked
/// up front, so a plan that does not fit is split into groups of layers rather
/// than failing in the middle).
std::size_t stack_budget(const DoseEngineOptions& options) {
  if (options.backend == Backend::kCpu) return options.max_stack_bytes;
  const std::size_t free_bytes = gpu_free_memory_bytes(options.gpu_device);
  const std::size_t device_pixels = static_cast<std::size_t>(0.8 * static_cast<double>(free_bytes)) /
                                    kGpuSuperpositionBytesPerPixel;
  const std::size_t device_budget = device_pixels * kStackBytesPerPixel;
  if (device_budget < options.max_stack_bytes)
    spdlog::info("GPU: {} MB free; superposition stacks limited to {} M pixels", free_bytes >> 20, device_pixels >> 20);
  return std::min(options.max_stack_bytes, std::max<std::size_t>(device_budget, kStackBytesPerPixel));
}

}  // namespace

DoseResult DoseEngine::compute(const CtImage& ct, const IonPlan& plan) const {
  const auto t_start = Clock::now();
  DoseResult result;
  result.backend = options_.backend;
  result.superposition_method = method_name(superposer_->method());
  result.quantity = options_.quantity;
  const std::size_t stack_budget_bytes = stack_budget(options_);
  result.rbe_factor = options_.rbe_factor;
  result.fractions = plan.number_of_fractions;
  result.energy_balance_tolerance = options_.energy_balance_tolerance;
  if (plan.beams.empty()) throw InputError("plan '" + plan.label + "' has no beams");
  if (plan.number_of_fractions < 1) {
    std::ostringstream m;
    m << "plan '" << plan.label << "': NumberOfFractionsPlanned is " << plan.number_of_fractions << "; must be >= 1";
    throw InputError(m.str());
  }
  ct.hu.grid.validate("CT");
  if (ct.hu.data.size() != ct.hu.grid.voxel_count())
    throw InputError("CT: number of HU values does not match the grid");

  PlanContext pc;
  pc.ct = &ct;
  pc.position = parse_patient_position(ct.patient_position);
  auto t0 = Clock::now();
  pc.rsp = Volume<float>(ct.hu.grid, 0.0f);
  pc.density = Volume<float>(ct.hu.grid, 0.0f);
  const physics::HuConversionReport report = hu_curve_.convert(ct.hu.data.data(), ct.hu.data.size(),
                                                               options_.hu_policy, pc.rsp.data.data(),
                                                               pc.density.data.data());
  if (!report.clamp_summary.empty()) spdlog::warn("HU conversion: {}", report.clamp_summary);
  const Grid3 og = output_grid(ct.hu.grid, options_.output_spacing_mm);
  if (og == ct.hu.grid) {
    pc.out_rsp = pc.rsp;
    pc.out_density = pc.density;
  } else {
    pc.out_rsp = Volume<float>(og, 0.0f);
    pc.out_density = Volume<float>(og, 0.0f);
    for (int k = 0; k < og.size[2]; ++k)
      for (int j = 0; j < og.size[1]; ++j)
        for (int i = 0; i < og.size[0]; ++i) {
          const Vec3 p = og.position_mm(i, j, k);
          pc.out_rsp.at(i, j, k) = sample_trilinear(pc.rsp, p);
          pc.out_density.at(i, j, k) = sample_trilinear(pc.density, p);
        }
  }
  result.timings.hu_conversion_s = seconds_since(t0);
  result.dose_gy = Volume<float>(og, 0.0f);

  const double voxel_cm3 = og.spacing_mm[0] * og.spacing_mm[1] * og.spacing_mm[2] / 1000.0;
  const bool to_water = options_.quantity == DoseQuantity::kDoseToWater;
  const int threads = options_.threads;

  for (const IonBeam& beam : plan.beams) {
    const std::string label = beam_label(beam);
    BeamDose bd;
    bd.beam_number = beam.number;
    bd.beam_name = beam.name;
    if (options_.require_machine_name_match && !beam.machine_name.empty() && beam.machine_name != machine_.name())
      throw InputError(label + ": TreatmentMachineName '" + beam.machine_name + "' does not match the beam model '" +
                       machine_.name() + "' (" + machine_.source() + ")");
    const BeamFrame frame(beam.gantry_angle_deg, beam.couch_angle_deg, beam.isocenter_mm, pc.position);
    const double sad_x = beam.vsad_x_mm.value_or(machine_.vsad_x_mm());
    const double sad_y = beam.vsad_y_mm.value_or(machine_.vsad_y_mm());

    // Range shifters: their WET is used up before the patient, and their
    // scattering widens the spots by the drift to each depth.
    double shifter_wet_mm = 0;
    double shifter_depth_mm = 0;  // downstream face, beam frame (negative: upstream of the isocentre)
    for (const RangeShifter& rs : beam.range_shifters) {
      if (!(rs.water_equivalent_thickness_mm > 0)) continue;
      if (!rs.isocenter_to_shifter_mm) {
        throw InputError(label + ": range shifter '" + rs.id +
                         "' has no IsocenterToRangeShifterDistance (300A,0364); the spot widening needs it");
      }
      shifter_wet_mm += rs.water_equivalent_thickness_mm;
      shifter_depth_mm = std::min(shifter_depth_mm, -*rs.isocenter_to_shifter_mm);
    }

    // Layers.
    std::vector<LayerWork> layers;
    double min_x = std::numeric_limits<double>::infinity(), max_x = -min_x, min_y = min_x, max_y = -min_x;
    double max_cutoff_mm = 0;
    for (const EnergyLayer& layer : beam.layers) {
      LayerWork L;
      L.layer = &layer;
      L.nominal_energy_mev = layer.nominal_energy_mev;
      L.mean_energy_mev = machine_.mean_energy_mev(layer.nominal_energy_mev);
      L.curve = &depth_dose(layer.nominal_energy_mev);
      L.shifter_wet_mm = shifter_wet_mm;
      L.fwhm_x_mm = layer.spot_fwhm_x_mm;
      L.fwhm_y_mm = layer.spot_fwhm_y_mm;
      const double per_unit = beam.meterset_unit == MetersetUnit::kMonitorUnits
                                  ? machine_.protons_per_mu(layer.nominal_energy_mev) : 1.0;
      for (const Spot& s : layer.spots) {
        if (!(s.meterset > 0)) continue;
        L.spots.push_back({s.x_mm, s.y_mm, s.meterset * per_unit});
        L.protons += s.meterset * per_unit;
        min_x = std::min(min_x, s.x_mm);
        max_x = std::max(max_x, s.x_mm);
        min_y = std::min(min_y, s.y_mm);
        max_y = std::max(max_y, s.y_mm);
      }
      if (L.spots.empty()) continue;
      bd.spots += L.spots.size();
      bd.energy.carried_mev +=
          L.protons * (L.curve->total_energy_mev() - L.curve->cidd_mev(shifter_wet_mm));
      // WEPL in the patient at which the pencils stop.
      L.cutoff_wepl_mm = std::min(options_.range_cutoff_factor * L.curve->r80_mm(), L.curve->end_depth_mm()) -
                         shifter_wet_mm;
      if (L.cutoff_wepl_mm <= 0) {
        spdlog::warn("{}: layer {:.2f} MeV stops in the range shifter (R80 {:.1f} mm, WET {:.1f} mm)", label,
                     L.nominal_energy_mev, L.curve->r80_mm(), shifter_wet_mm);
        continue;
      }
      const double e_after_shifter = physics::residual_energy_mev(L.mean_energy_mev, shifter_wet_mm);
      L.scattering = physics::ScatteringOptions::make(options_.scattering_model, e_after_shifter);
      if (options_.nuclear_halo) L.halo.emplace(e_after_shifter);
      const int n_table = static_cast<int>(std::ceil((L.cutoff_wepl_mm + 20.0) / kEnergyTableStepMm)) + 2;
      L.residual_energy_mev.resize(static_cast<std::size_t>(n_table));
      for (int i = 0; i < n_table; ++i)
        L.residual_energy_mev[static_cast<std::size_t>(i)] =
            physics::residual_energy_mev(L.mean_energy_mev, shifter_wet_mm + i * kEnergyTableStepMm);
      max_cutoff_mm = std::max(max_cutoff_mm, L.cutoff_wepl_mm);
      layers.push_back(std::move(L));
    }
    if (layers.empty()) {
      // A setup beam, or one whose layers all stop in the range shifter: its dose is exactly zero.
      spdlog::warn("{}: no spot with positive meterset reaches the patient; the beam adds no dose", label);
      if (options_.keep_per_beam) bd.dose_gy = Volume<float>(og, 0.0f);
      result.beams.push_back(std::move(bd));
      continue;
    }
    bd.layers = layers.size();

    // The depth range of the CT along this beam, and a first lateral margin.
    double ct_begin_mm = 0, ct_end_mm = 0;
    box_depth_range(ct.hu.grid, frame, ct_begin_mm, ct_end_mm);
    double max_air_sigma_mm = 0;
    for (const LayerWork& L : layers)
      for (double d : {ct_begin_mm, 0.0, ct_end_mm})
        for (physics::Axis a : {physics::Axis::kX, physics::Axis::kY})
          max_air_sigma_mm = std::max(max_air_sigma_mm, sigma_in_air(machine_, L, a, d, options_.spot_size_policy));
    const double mcs_estimate_mm = kMcsSigmaPerRangeEstimate * (max_cutoff_mm + shifter_wet_mm) +
                                   (shifter_wet_mm > 0 ? 0.02 * (ct_end_mm - shifter_depth_mm) : 0.0);
    double margin_mm = options_.cutoff_sigmas * std::hypot(max_air_sigma_mm, mcs_estimate_mm) +
                       2 * options_.ray_pitch_mm;

    std::vector<float> bev_dose;
    Volume<float> beam_dose;
    BevGrid grid;
    std::size_t total_stack_slices = 0;
    double expected_mev = 0;
    for (int attempt = 0;; ++attempt) {
      t0 = Clock::now();
      BevGridSpec spec;
      spec.spot_min_x_mm = min_x;
      spec.spot_max_x_mm = max_x;
      spec.spot_min_y_mm = min_y;
      spec.spot_max_y_mm = max_y;
      spec.margin_x_mm = spec.margin_y_mm = margin_mm;
      spec.pitch_x_mm = spec.pitch_y_mm = options_.ray_pitch_mm;
      spec.sad_x_mm = sad_x;
      spec.sad_y_mm = sad_y;
      spec.depth_begin_mm = ct_begin_mm;
      spec.depth_end_mm = ct_end_mm;
      spec.depth_step_mm = options_.depth_step_mm;
      const RayTrace full = trace_rays(make_bev_grid(spec), frame, pc.rsp, pc.density, threads);
      // Crop: from where the first ray enters the CT (dose to water is reported
      // in the air of the CT too, as the Monte Carlo references do) to where the
      // last pencil passes its range cut-off.
      int entry = std::numeric_limits<int>::max();
      for (int e : full.entry_slice)
        if (e >= 0) entry = std::min(entry, e);
      if (entry == std::numeric_limits<int>::max())
        throw InputError(label + ": no ray of the beam's field meets the patient in the CT (density >= 0.05 g/cm3)");
      int first = entry;
      for (int k = 0; k < entry; ++k) {
        const float* plane_rho = full.density_g_cm3.data() + static_cast<std::size_t>(k) * full.grid.rays();
        if (std::any_of(plane_rho, plane_rho + full.grid.rays(), [](float v) { return v > 0.0f; })) {
          first = k;
          break;
        }
      }
      const BevGrid& fg = full.grid;
      int last = first;
      for (LayerWork& L : layers) {
        int layer_last = first;
        for (int r = 0; r < fg.rows; ++r)
          for (int c = 0; c < fg.cols; ++c) {
            int k = first;
            while (k < fg.slices && full.wepl_near_mm(k, r, c) < L.cutoff_wepl_mm) ++k;
            layer_last = std::max(layer_last, k - 1);
          }
        L.slices = layer_last - first + 1;
        last = std::max(last, layer_last);
      }
      const RayTrace trace = crop_slices(full, first, last - first + 1);
      grid = trace.grid;
      result.timings.ray_tracing_s += seconds_since(t0);

      t0 = Clock::now();
      // Radiation length of every sample, shared by the layers.
      std::vector<float> x0_g_cm2(trace.density_g_cm3.size(), 0.0f);
      for (std::size_t i = 0; i < x0_g_cm2.size(); ++i)
        if (trace.density_g_cm3[i] > kMinScatteringDensityGcm3)
          x0_g_cm2[i] = static_cast<float>(physics::radiation_length_g_cm2(trace.density_g_cm3[i]));
      for (LayerWork& L : layers) {
        L.air_sigma_x_mm.resize(static_cast<std::size_t>(L.slices));
        L.air_sigma_y_mm.resize(static_cast<std::size_t>(L.slices));
        // The fluence is spread with the narrowest in-air spot over the layer's
        // slices (isocentre-plane units), so the remaining in-air growth
        // σ_air² − (σ_spread·m)² is ≥ 0 at every slice and goes into the kernels.
        L.spread_sigma_x_iso_mm = L.spread_sigma_y_iso_mm = std::numeric_limits<double>::infinity();
        for (int k = 0; k < L.slices; ++k) {
          const double d = grid.depth_mm(k);
          const double sx = sigma_in_air(machine_, L, physics::Axis::kX, d, options_.spot_size_policy);
          const double sy = sigma_in_air(machine_, L, physics::Axis::kY, d, options_.spot_size_policy);
          L.air_sigma_x_mm[static_cast<std::size_t>(k)] = sx;
          L.air_sigma_y_mm[static_cast<std::size_t>(k)] = sy;
          L.spread_sigma_x_iso_mm = std::min(L.spread_sigma_x_iso_mm, sx / grid.magnification_x(d));
          L.spread_sigma_y_iso_mm = std::min(L.spread_sigma_y_iso_mm, sy / grid.magnification_y(d));
        }
      }
      const std::size_t plane = grid.rays();
      const double pixel_area_iso_mm2 = grid.pitch_x_mm * grid.pitch_y_mm;
      const double grid_start_depth_mm = grid.depth_mm(0) - 0.5 * grid.depth_step_mm;
      result.timings.layer_images_s += seconds_since(t0);

      // The layers' slices form one stack and one superposition per beam, unless
      // the stack would exceed max_stack_bytes: then consecutive groups of layers
      // (logged), each a superposition of its own.
      std::vector<std::size_t> group_starts{0};
      {
        std::size_t bytes = 0;
        for (std::size_t li = 0; li < layers.size(); ++li) {
          const std::size_t layer_bytes = static_cast<std::size_t>(layers[li].slices) * plane * kStackBytesPerPixel;
          if (bytes > 0 && bytes + layer_bytes > stack_budget_bytes) {
            group_starts.push_back(li);
            bytes = 0;
          }
          bytes += layer_bytes;
        }
      }
      if (group_starts.size() > 1)
        spdlog::info("{}: the superposition stack exceeds {} MB; {} groups of layers", label,
                     stack_budget_bytes >> 20, group_starts.size());
      bev_dose.assign(grid.pixel_count(), 0.0f);
      beam_dose = Volume<float>(og, 0.0f);
      expected_mev = 0;
      total_stack_slices = 0;
      bool widen = false;
      for (std::size_t g = 0; g < group_starts.size() && !widen; ++g) {
        const std::size_t group_begin = group_starts[g];
        const std::size_t group_end = g + 1 < group_starts.size() ? group_starts[g + 1] : layers.size();
        t0 = Clock::now();
        std::size_t stack_slices = 0;
        for (std::size_t li = group_begin; li < group_end; ++li) {
          layers[li].stack_offset = stack_slices;
          stack_slices += static_cast<std::size_t>(layers[li].slices);
        }
        total_stack_slices += stack_slices;
        std::vector<float> image(stack_slices * plane, 0.0f), sigma_x(stack_slices * plane, 0.0f),
            sigma_y(stack_slices * plane, 0.0f);
        // The halo share of each input pixel (Gy) and its kernel variance (mm²), on the fine grid.
        std::vector<float> halo_image, halo_variance_mm2;
        if (options_.nuclear_halo) {
          halo_image.assign(stack_slices * plane, 0.0f);
          halo_variance_mm2.assign(stack_slices * plane, 0.0f);
        }
        std::vector<double> row_energy(static_cast<std::size_t>(grid.rows), 0.0);
        std::vector<int> row_overshoot_px(static_cast<std::size_t>(grid.rows), 0);
          for (std::size_t li = group_begin; li < group_end; ++li) {
            const LayerWork& L = layers[li];
            const std::vector<double> fluence =
                spread_spots_to_rays(grid, L.spots, L.spread_sigma_x_iso_mm, L.spread_sigma_y_iso_mm, options_.cutoff_sigmas);
            const double wet = L.shifter_wet_mm;
            physics::FermiEygesMoments shifter_moments;
            if (wet > 0) {
              // The shifters as one PMMA slab of their summed WET (DICOM states no
              // material; PMMA is the DCPT/MCsquare RS_3CM), its exit moments drift
              // to each depth along the ray.
              physics::RangeShifter rs;
              rs.id = "range shifter of " + label;
              rs.water_equivalent_thickness_mm = wet;
              rs.material = physics::pmma_range_shifter_material();
              shifter_moments = physics::range_shifter_exit_moments(
                  rs, L.mean_energy_mev, physics::ScatteringOptions::make(options_.scattering_model, L.mean_energy_mev));
            }
            parallel_for_chunks(static_cast<std::size_t>(grid.rows), threads, [&](std::size_t b, std::size_t e, int) {
              for (std::size_t rr = b; rr < e; ++rr) {
                const int r = static_cast<int>(rr);
                double energy = 0;
                int overshoot = 0;
                for (int c = 0; c < grid.cols; ++c) {
                  const std::size_t ray = rr * static_cast<std::size_t>(grid.cols) + static_cast<std::size_t>(c);
                  const double f = fluence[ray];
                  if (f <= 0) continue;
                  const double step_mm = trace.step_mm[ray];
                  physics::FermiEygesMoments m;
                  if (shifter_wet_mm > 0)
                    m = physics::drift(shifter_moments, (grid_start_depth_mm - shifter_depth_mm) * step_mm / grid.depth_step_mm);
                  for (int k = 0; k < L.slices; ++k) {
                    const std::size_t idx = grid.index(k, r, c);
                    const double w_near = trace.wepl_near_mm(k, r, c);
                    if (w_near >= L.cutoff_wepl_mm) break;
                    const double w_far = trace.wepl_far_mm[idx];
                    const double d_mev = L.curve->cidd_mev(std::min(w_far, L.cutoff_wepl_mm) + wet) -
                                         L.curve->cidd_mev(w_near + wet);
                    const double d = grid.depth_mm(k);
                    const double mx = grid.magnification_x(d), my = grid.magnification_y(d);
                    const double area_cm2 = pixel_area_iso_mm2 * mx * my / 100.0;
                    const double rho = trace.density_g_cm3[idx];
                    const double mass_g = to_water ? (w_far - w_near) / 10.0 * area_cm2 : rho * step_mm / 10.0 * area_cm2;
                    // Fermi–Eyges moments to the far face of the slice; the variance at
                    // the slice centre is the mean of near and far (exact to O(Δs²·T)).
                    const double e_mid = L.energy_at_wepl(0.5 * (w_near + w_far));
                    const bool scatters = rho > kMinScatteringDensityGcm3 && e_mid > kMinScatteringEnergyMev;
                    const double a2_near = m.a2_mm2;
                    m = scatters ? physics::advance(m, step_mm, rho, x0_g_cm2[idx], e_mid, L.scattering)
                                 : physics::drift(m, step_mm);
                    const double a2_centre = 0.5 * (a2_near + m.a2_mm2);
                    if (d_mev <= 0 || mass_g <= 0) continue;
                    energy += f * d_mev;
                    const double pixel_gy = f * d_mev / mass_g * kGyPerMevPerGram;
                    const std::size_t sidx = (L.stack_offset + static_cast<std::size_t>(k)) * plane + ray;
                    const double sxm = L.spread_sigma_x_iso_mm * mx, sym = L.spread_sigma_y_iso_mm * my;
                    if (L.halo) {
                      // Double-Gaussian pencil (da Silva et al., Front Oncol 5:281, 2015): the
                      // fraction W of this step's energy spreads with the halo σ (total
                      // width; the spread fluence already carries σ_spread).
                      const double w_halo = std::min(0.5 * (w_near + w_far),
                                                     0.999 * physics::NuclearHalo::kMaxDepthOverRange * L.halo->csda_range_mm());
                      const double weight = L.halo->weight_fraction(w_halo);
                      const double sh = L.halo->sigma_mm(w_halo);
                      halo_image[sidx] = static_cast<float>(weight * pixel_gy);
                      halo_variance_mm2[sidx] = static_cast<float>(std::max(sh * sh - 0.5 * (sxm * sxm + sym * sym), 0.0));
                      image[sidx] = static_cast<float>((1 - weight) * pixel_gy);
                    } else {
                      image[sidx] = static_cast<float>(pixel_gy);
                    }
                    const double vx = L.air_sigma_x_mm[static_cast<std::size_t>(k)] * L.air_sigma_x_mm[static_cast<std::size_t>(k)] -
                                      sxm * sxm + a2_centre;
                    const double vy = L.air_sigma_y_mm[static_cast<std::size_t>(k)] * L.air_sigma_y_mm[static_cast<std::size_t>(k)] -
                                      sym * sym + a2_centre;
                    const float spx = static_cast<float>(std::sqrt(std::max(vx, 0.0)) / (grid.pitch_x_mm * mx));
                    const float spy = static_cast<float>(std::sqrt(std::max(vy, 0.0)) / (grid.pitch_y_mm * my));
                    sigma_x[(L.stack_offset + static_cast<std::size_t>(k)) * plane + ray] = spx;
                    sigma_y[(L.stack_offset + static_cast<std::size_t>(k)) * plane + ray] = spy;
                    const int rx = kernel_radius_px(spx, static_cast<float>(options_.cutoff_sigmas));
                    const int ry = kernel_radius_px(spy, static_cast<float>(options_.cutoff_sigmas));
                    overshoot = std::max({overshoot, rx - c, c + rx - (grid.cols - 1), ry - r, r + ry - (grid.rows - 1)});
                  }
                }
                row_energy[rr] += energy;
                row_overshoot_px[rr] = std::max(row_overshoot_px[rr], overshoot);
              }
            });
          }
        result.timings.layer_images_s += seconds_since(t0);
        const int overshoot_px = *std::max_element(row_overshoot_px.begin(), row_overshoot_px.end());
        if (overshoot_px > 0 && attempt == 0) {
          // A kernel reaches past the grid edge: widen and redo rather than clip.
          const double m_max = std::max(grid.magnification_x(grid.depth_mm(grid.slices - 1)), 1.0);
          margin_mm += (overshoot_px + 2) * options_.ray_pitch_mm * m_max;
          spdlog::info("{}: kernels reach {} px past the BEV grid; widening the margin to {:.1f} mm", label,
                       overshoot_px, margin_mm);
          widen = true;
          break;
        }
        for (double v : row_energy) expected_mev += v;

        // The superposition of the group's whole stack.
        t0 = Clock::now();
        std::vector<float> stack_out(stack_slices * plane, 0.0f);
        SuperpositionInput in;
        in.shape = {static_cast<int>(stack_slices), grid.rows, grid.cols};
        in.image = {image.data(), image.size()};
        in.sigma_x_px = {sigma_x.data(), sigma_x.size()};
        in.sigma_y_px = {sigma_y.data(), sigma_y.size()};
        superposer_->superpose(in, stack_out.data());
        for (std::size_t li = group_begin; li < group_end; ++li)
          for (int k = 0; k < layers[li].slices; ++k) {
            const float* src = stack_out.data() + (layers[li].stack_offset + static_cast<std::size_t>(k)) * plane;
            float* dst = bev_dose.data() + static_cast<std::size_t>(k) * plane;
            for (std::size_t q = 0; q < plane; ++q) dst[q] += src[q];
          }
        result.timings.superposition_s += seconds_since(t0);
        if (options_.nuclear_halo) {
          t0 = Clock::now();
          std::vector<int> stack_depth_slice(stack_slices);
          for (std::size_t li = group_begin; li < group_end; ++li)
            for (int k = 0; k < layers[li].slices; ++k)
              stack_depth_slice[layers[li].stack_offset + static_cast<std::size_t>(k)] = k;
          add_nuclear_halo(grid, frame, stack_depth_slice, halo_image, halo_variance_mm2, *superposer_,
                           options_.cutoff_sigmas, threads, beam_dose);
          result.timings.nuclear_halo_s += seconds_since(t0);
        }
      }
      if (widen) continue;
      break;
    }
    bd.energy.expected_mev = expected_mev;
    bd.bev_pixels = total_stack_slices * grid.rays();
    bd.bev_size = {grid.cols, grid.rows, grid.slices};

    t0 = Clock::now();
    add_bev_to_patient(grid, frame, bev_dose, 1.0, beam_dose, threads);
    result.timings.resampling_s += seconds_since(t0);

    t0 = Clock::now();
    check_dose_values(beam_dose, label);
    double deposited = 0;
    for (std::size_t i = 0; i < beam_dose.data.size(); ++i) {
      const double mass_g_per_cm3 = to_water ? pc.out_rsp.data[i] : pc.out_density.data[i];
      deposited += static_cast<double>(beam_dose.data[i]) * mass_g_per_cm3;
    }
    bd.energy.deposited_mev = deposited * voxel_cm3 / kGyPerMevPerGram;
    spdlog::info("{}: {} layers, {} spots, BEV {}x{}x{} ({} stack slices); energy carried {:.4g} MeV, in the "
                 "patient {:.4g} MeV, deposited on the dose grid {:.4g} MeV ({:+.2f} %)",
                 label, bd.layers, bd.spots, grid.cols, grid.rows, grid.slices, total_stack_slices,
                 bd.energy.carried_mev, bd.energy.expected_mev, bd.energy.deposited_mev,
                 100 * bd.energy.relative_difference());
    if (std::abs(bd.energy.relative_difference()) > options_.energy_balance_tolerance) {
      std::ostringstream m;
      m << label << ": energy balance violated: " << bd.energy.deposited_mev << " MeV deposited on the dose grid vs "
        << bd.energy.expected_mev << " MeV in the pencils (" << 100 * bd.energy.relative_difference()
        << " %; tolerance +/- " << 100 * options_.energy_balance_tolerance << " %)";
      throw NumericalError(m.str());
    }
    for (std::size_t i = 0; i < beam_dose.data.size(); ++i) result.dose_gy.data[i] += beam_dose.data[i];
    result.energy.carried_mev += bd.energy.carried_mev;
    result.energy.expected_mev += bd.energy.expected_mev;
    result.energy.deposited_mev += bd.energy.deposited_mev;
    result.spots += bd.spots;
    if (options_.keep_per_beam) {
      if (options_.rbe_factor)
        for (float& v : beam_dose.data) v = static_cast<float>(v * *options_.rbe_factor);
      bd.dose_gy = std::move(beam_dose);
    }
    result.timings.checks_s += seconds_since(t0);
    result.beams.push_back(std::move(bd));
  }

  if (result.spots == 0)
    throw InputError("plan '" + plan.label + "': no beam has a spot with positive meterset that reaches the patient");
  t0 = Clock::now();
  if (options_.rbe_factor)
    for (float& v : result.dose_gy.data) v = static_cast<float>(v * *options_.rbe_factor);
  check_dose_values(result.dose_gy, "plan '" + plan.label + "'");
  for (float v : result.dose_gy.data) result.max_dose_gy = std::max(result.max_dose_gy, static_cast<double>(v));
  result.timings.checks_s += seconds_since(t0);
  result.timings.total_s = seconds_since(t_start);
  return result;
}

}  // namespace protondose::engine
