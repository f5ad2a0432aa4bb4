#include "protondose/engine/dose_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>

#include "beam_executor.h"
#include "beam_geometry.h"
#include "protondose/core/error.h"
#include "protondose/core/host_timeline.h"
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
#include "protondose/physics/scattering.h"

namespace protondose::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Below kernels::kMinScatteringEnergyMev (beam_kernels.h) a proton is at the
// end of its range and its moments only drift; below kMinScatteringDensity a
// sample scatters nothing.
using kernels::kMinScatteringDensity;
using kernels::kMinScatteringEnergyMev;
/// Rough upper bound of the Fermi–Eyges σ at the end of range as a fraction of
/// the range (water, Highland: ≈ 2–2.5 % of R; more behind low-density
/// material, where the lever arm is longer), used only to size the BEV
/// grid's first attempt; a second attempt widens it when the σ-maps need more.
constexpr double kMcsSigmaPerRangeEstimate = 0.05;
/// Bytes per pixel of a superposition stack: image, σx, σy, output, and the
/// halo share and variance; on the device also the deterministic mode's
/// 64-bit accumulator and the separable passes' row intermediate.
constexpr std::size_t kStackBytesPerPixel = 6 * sizeof(float);
constexpr std::size_t kDeviceStackBytesPerPixel = kStackBytesPerPixel + sizeof(unsigned long long) + sizeof(float);
/// Default stack budget of the CPU backend (host memory).
constexpr std::size_t kDefaultHostStackBytes = std::size_t{2} << 30;
/// Spacing (mm of WEPL) of the residual-energy lookup table of a layer.
constexpr double kEnergyTableStepMm = 0.5;

/// What a prepared plan holds of one energy layer whose pencils reach the
/// patient: fixed by the plan and the engine, whatever the CT.
struct PreparedLayer {
  double nominal_energy_mev = 0;
  double cutoff_wepl_mm = 0;  ///< pencils stop here (WEPL in the patient, > 0)
  std::vector<SpotProtons> spots;  ///< positive-meterset spots, in protons, validated
  /// The energy's tables (residual energy, scattering power, halo, shifter moments).
  std::shared_ptr<const DoseEngine::LayerPhysics> physics;
  /// The spot's emittance per axis (x, y), looked up once per layer: the
  /// in-air σ is evaluated at every slice of every layer (BeamModel's lookup
  /// per call took most of the water cube's host set-up, 0.8 ms).
  physics::AxisEmittance emittance[2];
};

/// What one layer of a beam needs in the BEV stage on one CT: its prepared
/// part and what the beam's grid fixes.
struct LayerWork {
  const PreparedLayer* prepared = nullptr;
  int slices = 0;  ///< slices [0, slices) of the cropped trace carry this layer
  std::size_t stack_offset = 0;  ///< first stack slice
  /// The σ the layer's spots are spread onto the rays with (isocentre
  /// plane): the narrowest in-air spot over the slices of the full grid
  /// (air_sigma_on_full_grid).
  double spread_sigma_x_iso_mm = 0, spread_sigma_y_iso_mm = 0;
  std::vector<double> air_sigma_x_mm, air_sigma_y_mm;  ///< in-air σ at each slice centre of the cropped grid
  /// The in-air σ at each slice of the full (uncropped) grid: the cropped
  /// grid's tables are taken from them (crop_air_sigma).
  std::vector<double> full_air_sigma_x_mm, full_air_sigma_y_mm;
};

physics::AxisEmittance layer_emittance(const physics::BeamModel& m, const EnergyLayer& layer, physics::Axis axis,
                                       physics::SpotSizePolicy policy) {
  const std::optional<double>& fwhm = axis == physics::Axis::kX ? layer.spot_fwhm_x_mm : layer.spot_fwhm_y_mm;
  // A plan without ScanningSpotSize leaves nothing to override: the model's size is the only one.
  if (policy == physics::SpotSizePolicy::kPlanSpotSizeAtIsocentre && !fwhm)
    policy = physics::SpotSizePolicy::kBeamModel;
  return m.spot_emittance(layer.nominal_energy_mev, axis, policy, fwhm);
}

/// In-air σ (mm) of layer L's spots at depth_mm from the isocentre
/// (BeamModel::spot_sigma_in_air_mm with the layer's emittance).
double sigma_in_air(const physics::BeamModel& m, const PreparedLayer& L, physics::Axis axis, double depth_mm) {
  return physics::sigma_in_air_at_z_from_isocentre_mm(L.emittance[axis == physics::Axis::kX ? 0 : 1],
                                                      m.reference_plane_upstream_of_isocentre_mm(), depth_mm);
}

/// Layer L's in-air σ at every slice of the full grid (LayerWork::full_*),
/// and its spread σ: the narrowest of them projected to the isocentre plane
/// (σ_air(d)/m(d)), so that the in-air growth left to the kernels,
/// σ_air² − (σ_spread·m)², is ≥ 0 at every slice of any crop. Taken over the
/// full grid rather than the cropped one, it is known before the trace's
/// summary, and the GPU spreads the fluence while the host crops (until
/// 2026-11-27 over the cropped slices: the spreading then waited for the
/// crop, ~0.1 ms of the water cube with the GPU idle, H100).
void air_sigma_on_full_grid(const physics::BeamModel& m, const BevGrid& full, LayerWork& L) {
  const auto n = static_cast<std::size_t>(full.slices);
  L.full_air_sigma_x_mm.resize(n);
  L.full_air_sigma_y_mm.resize(n);
  double iso_x = std::numeric_limits<double>::infinity(), iso_y = iso_x;
  for (std::size_t k = 0; k < n; ++k) {
    const double d = full.depth_mm(static_cast<int>(k));
    const double sx = sigma_in_air(m, *L.prepared, physics::Axis::kX, d);
    const double sy = sigma_in_air(m, *L.prepared, physics::Axis::kY, d);
    L.full_air_sigma_x_mm[k] = sx;
    L.full_air_sigma_y_mm[k] = sy;
    iso_x = std::min(iso_x, sx / full.magnification_x(d));
    iso_y = std::min(iso_y, sy / full.magnification_y(d));
  }
  L.spread_sigma_x_iso_mm = iso_x;
  L.spread_sigma_y_iso_mm = iso_y;
}

/// The cropped grid's in-air σ tables of layer L: its slices from the full
/// grid's slice `first` on (check_trace_summary keeps them within it).
void crop_air_sigma(LayerWork& L, int first) {
  const auto from = [&](const std::vector<double>& v) { return v.begin() + first; };
  const auto to = [&](const std::vector<double>& v) { return v.begin() + first + L.slices; };
  L.air_sigma_x_mm.assign(from(L.full_air_sigma_x_mm), to(L.full_air_sigma_x_mm));
  L.air_sigma_y_mm.assign(from(L.full_air_sigma_y_mm), to(L.full_air_sigma_y_mm));
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

SuperpositionMethod superposition_method(Backend b, bool tensor_core_scatter) {
  switch (b) {
    case Backend::kCpu: return SuperpositionMethod::kCpuReference;
    case Backend::kGpu:
      return tensor_core_scatter ? SuperpositionMethod::kGpuScatterTensorCore : SuperpositionMethod::kGpuScatterTiled;
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
  if (halo_pitch_mm && (!(*halo_pitch_mm > 0) || !(*halo_pitch_mm <= 20))) bad("halo_pitch_mm", *halo_pitch_mm, "(0, 20] mm");
  if (!(energy_balance_tolerance > 0) || !(energy_balance_tolerance < 1))
    bad("energy_balance_tolerance", energy_balance_tolerance, "(0, 1)");
  if (threads < 0) bad("threads", threads, "[0, inf)");
  if (max_stack_bytes && *max_stack_bytes == 0) bad("max_stack_bytes", 0, "[1, inf) bytes");
  if (!(gpu_memory_share > 0) || !(gpu_memory_share <= 1)) bad("gpu_memory_share", gpu_memory_share, "(0, 1]");
  if (cpu_float_layer_images_for_testing && backend != Backend::kCpu)
    throw ConfigError(std::string("dose engine option cpu_float_layer_images_for_testing is for the cpu backend only (") +
                      backend_name(backend) + " runs its layer images in float already)");
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

namespace {

/// NumericalError naming voxel `voxel` (linear index on `g`), its position and value.
[[noreturn]] void throw_bad_dose(const Grid3& g, long long voxel, float value, const std::string& what) {
  const std::size_t v = static_cast<std::size_t>(voxel);
  const std::size_t nx = static_cast<std::size_t>(g.size[0]), ny = static_cast<std::size_t>(g.size[1]);
  const int i = static_cast<int>(v % nx), j = static_cast<int>((v / nx) % ny), k = static_cast<int>(v / (nx * ny));
  const Vec3 p = g.position_mm(i, j, k);
  std::ostringstream m;
  m << what << ": dose " << value << " Gy at voxel (" << i << ", " << j << ", " << k << "), patient (" << p[0] << ", "
    << p[1] << ", " << p[2] << ") mm; every dose must be finite and >= 0";
  throw NumericalError(m.str());
}

}  // namespace

void check_dose_values(const Volume<float>& dose, const std::string& what) {
  for (std::size_t v = 0; v < dose.data.size(); ++v)
    if (!std::isfinite(dose.data[v]) || dose.data[v] < 0.0f)
      throw_bad_dose(dose.grid, static_cast<long long>(v), dose.data[v], what);
}

DoseEngine::DoseEngine(physics::BeamModel machine, physics::HuCurve hu_curve, DoseEngineOptions options)
    : machine_(std::move(machine)), hu_curve_(std::move(hu_curve)), options_(std::move(options)) {
  static std::atomic<std::uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  options_.validate();
  SuperpositionOptions so;
  so.cutoff_sigmas = options_.cutoff_sigmas;
  so.cpu_threads = options_.threads;
  so.gpu_device = options_.gpu_device;
  so.separable_uniform_slices = options_.separable_uniform_slices;
  so.tensor_core_min_radius_px = options_.tensor_core_min_radius_px;
  const SuperpositionMethod method = superposition_method(options_.backend, options_.tensor_core_scatter);
  if (options_.backend == Backend::kCpu) {
    superposer_ = make_superposer(method, so);
    executor_ = make_cpu_beam_executor(*superposer_, options_.threads,
                                       options_.cpu_float_layer_images_for_testing ? LayerArithmetic::kFloat
                                                                                   : LayerArithmetic::kDouble);
    stack_pixel_budget_ = options_.max_stack_bytes.value_or(kDefaultHostStackBytes) / kStackBytesPerPixel;
  } else {
    executor_ = make_gpu_beam_executor(method, so);
    // Sized once, before the engine holds any device memory, so every call
    // groups the layers the same way.
    const std::size_t free_bytes = gpu_free_memory_bytes(options_.gpu_device);
    stack_pixel_budget_ =
        static_cast<std::size_t>(0.8 * options_.gpu_memory_share * static_cast<double>(free_bytes)) /
        kDeviceStackBytesPerPixel;
    if (options_.max_stack_bytes)
      stack_pixel_budget_ = std::min(stack_pixel_budget_, *options_.max_stack_bytes / kStackBytesPerPixel);
    spdlog::debug("GPU {}: {} MB free; superposition stacks up to {} M pixels", options_.gpu_device, free_bytes >> 20,
                  stack_pixel_budget_ >> 20);
  }
  stack_pixel_budget_ = std::max<std::size_t>(stack_pixel_budget_, 1);
}

DoseEngine::~DoseEngine() = default;

const physics::CumulativeDepthDose& DoseEngine::depth_dose(double e) const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  auto it = depth_dose_cache_.find(e);
  if (it == depth_dose_cache_.end()) it = depth_dose_cache_.emplace(e, machine_.depth_dose(e)).first;
  return it->second;
}

/// What a layer's nominal energy and its beam's range-shifter WET fix, with
/// the engine's options, whatever the CT and the spot weights: the tables the
/// kernels interpolate along each ray (0.5 mm WEPL steps from the patient
/// surface). Computing them takes ~0.1 µs per entry, i.e. milliseconds per
/// clinical beam — as long as the GPU's whole ray tracing — so a warm engine
/// computes them once.
struct DoseEngine::LayerPhysics {
  double mean_energy_mev = 0;
  const physics::CumulativeDepthDose* curve = nullptr;  ///< owned by depth_dose_cache_ (never evicted)
  std::vector<kernels::CurveNode> curve_nodes;  ///< the curve as the layer images read it (padded: kernels::curve_nodes)
  double carried_per_proton_mev = 0;  ///< the curve's total less the CIDD used up in the shifter
  double cutoff_wepl_mm = 0;          ///< WEPL in the patient where the pencils stop; ≤ 0: in the shifter
  std::vector<double> residual_energy_mev;  ///< at WEPL i·kEnergyTableStepMm after the shifter
  std::vector<double> scattering_factor;    ///< scattering power per unit ρ/X at those energies
  bool has_halo = false;
  double halo_max_wepl_mm = 0;
  bool halo_sigma_is_added = false;  ///< Soukup: σ_N added to each pixel's core; else the total width
  std::vector<double> halo_weight, halo_sigma_mm;
  physics::FermiEygesMoments shifter_exit{};  ///< at the shifters' downstream face (WET > 0 only)
};

std::shared_ptr<const DoseEngine::LayerPhysics> DoseEngine::layer_physics(double nominal_energy_mev,
                                                                          double shifter_wet_mm) const {
  const std::pair<double, double> key{nominal_energy_mev, shifter_wet_mm};
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = layer_physics_cache_.find(key);
    if (it != layer_physics_cache_.end()) return it->second;
  }
  auto P = std::make_shared<LayerPhysics>();
  P->mean_energy_mev = machine_.mean_energy_mev(nominal_energy_mev);
  P->curve = &depth_dose(nominal_energy_mev);
  P->curve_nodes = kernels::curve_nodes(P->curve->depth_mm().data(), P->curve->idd_nodes_mev_cm2_g().data(),
                                       P->curve->cidd_nodes_mev().data(),
                                       static_cast<int>(P->curve->depth_mm().size()));
  P->carried_per_proton_mev = P->curve->total_energy_mev() - P->curve->cidd_mev(shifter_wet_mm);
  P->cutoff_wepl_mm = std::min(options_.range_cutoff_factor * P->curve->r80_mm(), P->curve->end_depth_mm()) -
                      shifter_wet_mm;
  if (P->cutoff_wepl_mm > 0) {
    const double e_after_shifter = physics::residual_energy_mev(P->mean_energy_mev, shifter_wet_mm);
    const physics::ScatteringOptions scattering = physics::ScatteringOptions::make(options_.scattering_model, e_after_shifter);
    const int n_table = static_cast<int>(std::ceil((P->cutoff_wepl_mm + 20.0) / kEnergyTableStepMm)) + 2;
    P->residual_energy_mev.resize(static_cast<std::size_t>(n_table));
    P->scattering_factor.resize(static_cast<std::size_t>(n_table));
    for (std::size_t i = 0; i < P->residual_energy_mev.size(); ++i) {
      P->residual_energy_mev[i] =
          physics::residual_energy_mev(P->mean_energy_mev, shifter_wet_mm + static_cast<double>(i) * kEnergyTableStepMm);
      // Fermi–Rossi / Highland or Gottschalk's differential forms
      // (physics/scattering.h); past the end of range the energy is held at
      // kMinScatteringEnergyMev, where the kernels stop advancing the moments.
      P->scattering_factor[i] = physics::scattering_power_rad2_per_mm(
          std::max(P->residual_energy_mev[i], kMinScatteringEnergyMev), 1.0, 1.0, scattering, 1.0);
    }
    if (options_.nuclear_halo) {
      const physics::NuclearHalo halo(e_after_shifter, options_.halo_model);
      P->has_halo = true;
      P->halo_max_wepl_mm = 0.999 * physics::NuclearHalo::kMaxDepthOverRange * halo.csda_range_mm();
      P->halo_sigma_is_added = halo.model() == physics::HaloModel::kSoukup2005;
      P->halo_weight.resize(P->residual_energy_mev.size());
      P->halo_sigma_mm.resize(P->residual_energy_mev.size());
      for (std::size_t i = 0; i < P->residual_energy_mev.size(); ++i) {
        const double w = std::min(static_cast<double>(i) * kEnergyTableStepMm, P->halo_max_wepl_mm);
        P->halo_weight[i] = halo.weight_fraction(w);
        P->halo_sigma_mm[i] = P->halo_sigma_is_added ? halo.added_sigma_mm(w) : halo.sigma_mm(w);
      }
    }
    if (shifter_wet_mm > 0) {
      // The shifters as one PMMA slab of their summed WET (DICOM states no
      // material; PMMA is the DCPT/MCsquare RS_3CM); its exit moments drift
      // to each depth along the ray.
      physics::RangeShifter rs;
      rs.id = "range shifter";
      rs.water_equivalent_thickness_mm = shifter_wet_mm;
      rs.material = physics::pmma_range_shifter_material();
      P->shifter_exit = physics::range_shifter_exit_moments(
          rs, P->mean_energy_mev, physics::ScatteringOptions::make(options_.scattering_model, P->mean_energy_mev));
    }
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  constexpr std::size_t kMaxLayerPhysics = 1024;  // a machine has ~100 energies; many shifters are rare
  if (layer_physics_cache_.size() >= kMaxLayerPhysics) layer_physics_cache_.clear();
  return layer_physics_cache_.emplace(key, std::move(P)).first->second;
}

namespace {

std::atomic<std::uint64_t> next_prepared_ct_id{1};

/// ConfigError unless the range scenario's RSP factor is finite and > 0.
void require_valid_rsp_scale(double rsp_scale) {
  if (!(rsp_scale > 0) || !std::isfinite(rsp_scale)) {
    std::ostringstream m;
    m << "rsp_scale " << rsp_scale << " must be a finite number > 0";
    throw ConfigError(m.str());
  }
}

/// A CT-grid volume trilinearly resampled onto the output grid.
Volume<float> on_output_grid(const Volume<float>& v, const Grid3& og) {
  Volume<float> out(og, 0.0f);
  for (int k = 0; k < og.size[2]; ++k)
    for (int j = 0; j < og.size[1]; ++j)
      for (int i = 0; i < og.size[0]; ++i) out.at(i, j, k) = sample_trilinear(v, og.position_mm(i, j, k));
  return out;
}

}  // namespace

std::shared_ptr<const PreparedCt> DoseEngine::prepare(const CtImage& ct, double rsp_scale) const {
  return prepare_ct(ct, hu_curve_, options_, rsp_scale);
}

std::shared_ptr<const PreparedCt> prepare_ct(const CtImage& ct, const physics::HuCurve& hu_curve,
                                             const DoseEngineOptions& options, double rsp_scale) {
  const auto t0 = Clock::now();
  options.validate();
  require_valid_rsp_scale(rsp_scale);
  ct.hu.grid.validate("CT");
  if (ct.hu.data.size() != ct.hu.grid.voxel_count())
    throw InputError("CT: number of HU values does not match the grid");
  auto p = std::make_shared<PreparedCt>();
  p->ct_grid = ct.hu.grid;
  p->patient_position = ct.patient_position;
  p->rsp = Volume<float>(ct.hu.grid, 0.0f);
  p->density = Volume<float>(ct.hu.grid, 0.0f);
  // In parallel over voxel chunks, each under the strict policy; a chunk with
  // anything to report (an HU outside the curve, a non-finite value) sends the
  // whole CT through one serial pass under the engine's policy, so that the
  // error names the first such voxel and the clamp summary counts them all.
  {
    const std::size_t n = ct.hu.data.size();
    std::atomic<bool> needs_serial_pass{false};
    parallel_for_chunks(n, options.threads, [&](std::size_t b, std::size_t e, int) {
      try {
        hu_curve.convert(ct.hu.data.data() + b, e - b, physics::HuCoveragePolicy::kError, p->rsp.data.data() + b,
                          p->density.data.data() + b);
        if (rsp_scale != 1.0)
          for (std::size_t i = b; i < e; ++i) p->rsp.data[i] = static_cast<float>(p->rsp.data[i] * rsp_scale);
      } catch (const InputError&) {
        needs_serial_pass = true;
      }
    });
    if (needs_serial_pass) {
      const physics::HuConversionReport report =
          hu_curve.convert(ct.hu.data.data(), n, options.hu_policy, p->rsp.data.data(), p->density.data.data());
      if (!report.clamp_summary.empty()) spdlog::warn("HU conversion: {}", report.clamp_summary);
      if (rsp_scale != 1.0)
        for (float& v : p->rsp.data) v = static_cast<float>(v * rsp_scale);
    }
  }
  const Grid3 og = output_grid(ct.hu.grid, options.output_spacing_mm);
  p->out_grid = og;
  if (og != ct.hu.grid) {
    p->out_rsp = on_output_grid(p->rsp, og);
    p->out_density = on_output_grid(p->density, og);
  }
  // 1/X of the scattering model's length (radiation length for the Highland
  // forms, Gottschalk's scattering length for the differential Molière form),
  // tabulated over the CT's density range: the scattering power is
  // T = T(E)|_{ρ/X = 1} · ρ/X, and the kernels look X up in this table.
  float max_density = 0;
  {
    std::vector<float> chunk_max(static_cast<std::size_t>(default_thread_count()), 0.0f);
    parallel_for_chunks(p->density.data.size(), static_cast<int>(chunk_max.size()),
                        [&](std::size_t b, std::size_t e, int worker) {
                          float m = 0.0f;
                          for (std::size_t i = b; i < e; ++i) m = std::max(m, p->density.data[i]);
                          chunk_max[static_cast<std::size_t>(worker)] = m;
                        });
    for (float m : chunk_max) max_density = std::max(max_density, m);
  }
  const double step = p->density_step_g_cm3;
  const int nodes = static_cast<int>(std::ceil(max_density / step)) + 2;
  p->inverse_length_table.resize(static_cast<std::size_t>(nodes));
  const bool moliere = options.scattering_model == physics::ScatteringPowerModel::kDifferentialMoliere;
  for (int i = 0; i < nodes; ++i) {
    const double rho = std::max(i * step, kMinScatteringDensity);
    p->inverse_length_table[static_cast<std::size_t>(i)] =
        1.0 / (moliere ? physics::scattering_length_g_cm2(rho) : physics::radiation_length_g_cm2(rho));
  }
  p->rsp_scale = rsp_scale;
  p->id = next_prepared_ct_id.fetch_add(1);
  p->conversion_s = seconds_since(t0);
  return p;
}

std::shared_ptr<const PreparedCt> rescaled_ct(const PreparedCt& nominal, double rsp_scale) {
  const auto t0 = Clock::now();
  require_valid_rsp_scale(rsp_scale);
  if (nominal.rsp_scale != 1.0) {
    std::ostringstream m;
    m << "rescaled_ct: the CT was prepared at rsp_scale " << nominal.rsp_scale << ", not the nominal 1";
    throw InternalError(m.str());
  }
  auto p = std::make_shared<PreparedCt>();
  p->ct_grid = nominal.ct_grid;
  p->patient_position = nominal.patient_position;
  p->out_grid = nominal.out_grid;
  // What the scale leaves alone is copied; the RSP is scaled as prepare_ct
  // scales it (the float RSP times the double scale, rounded to float), and
  // resampled from the scaled values, so the result is prepare_ct's bitwise.
  p->density = nominal.density;
  p->out_density = nominal.out_density;
  p->inverse_length_table = nominal.inverse_length_table;
  p->density_step_g_cm3 = nominal.density_step_g_cm3;
  p->rsp = Volume<float>(nominal.rsp.grid, 0.0f);
  parallel_for_chunks(p->rsp.data.size(), 0, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t i = b; i < e; ++i) p->rsp.data[i] = static_cast<float>(nominal.rsp.data[i] * rsp_scale);
  });
  if (!nominal.out_rsp.data.empty()) p->out_rsp = on_output_grid(p->rsp, p->out_grid);
  p->rsp_scale = rsp_scale;
  p->id = next_prepared_ct_id.fetch_add(1);
  p->conversion_s = seconds_since(t0);
  return p;
}

/// A beam of a prepared plan: what compute() needs of the plan's beam, with
/// its layers whose pencils reach the patient prepared (PreparedLayer).
struct PreparedPlan::Beam {
  int number = 0;
  std::string name;
  std::string label;  ///< "beam 2 'name'": what the messages name
  double gantry_angle_deg = 0, couch_angle_deg = 0;
  Vec3 isocenter_mm{0, 0, 0};
  double sad_x_mm = 0, sad_y_mm = 0;
  double shifter_wet_mm = 0;
  double shifter_depth_mm = 0;  ///< the shifters' downstream face, beam frame (negative: upstream of the isocentre)
  /// Those whose pencils reach the patient, in plan order; shared with the
  /// plan's shifted() copies.
  std::shared_ptr<const std::vector<PreparedLayer>> layers;
  /// Positive-meterset spots, those of layers that stop in the range shifter
  /// included, and the energy they carry (protons × the CIDD past the shifter).
  std::size_t spots = 0;
  double carried_mev = 0;
  /// The extent of the layers' spots (isocentre plane, mm) and their largest cut-off.
  double min_x_mm = 0, max_x_mm = 0, min_y_mm = 0, max_y_mm = 0;
  double max_cutoff_mm = 0;
};

PreparedPlan::PreparedPlan() = default;
PreparedPlan::~PreparedPlan() = default;
std::size_t PreparedPlan::beam_count() const { return beams_.size(); }

std::shared_ptr<const PreparedPlan> PreparedPlan::shifted(const Vec3& shift_mm) const {
  std::shared_ptr<PreparedPlan> p(new PreparedPlan);
  p->label_ = label_;
  p->fractions_ = fractions_;
  p->spots_ = spots_;
  p->id_ = id_;
  p->engine_id_ = engine_id_;
  p->beams_ = beams_;  // the layers shared
  for (Beam& b : p->beams_)
    for (int a = 0; a < 3; ++a) b.isocenter_mm[a] -= shift_mm[a];
  return p;
}

std::shared_ptr<const PreparedPlan> DoseEngine::prepare_plan(const IonPlan& plan) const {
  return prepare_plan(plan, true);
}

std::shared_ptr<const PreparedPlan> DoseEngine::prepare_plan(const IonPlan& plan, bool cached) const {
  const auto t_start = Clock::now();
  if (plan.beams.empty()) throw InputError("plan '" + plan.label + "' has no beams");
  if (plan.number_of_fractions < 1) {
    std::ostringstream m;
    m << "plan '" << plan.label << "': NumberOfFractionsPlanned is " << plan.number_of_fractions << "; must be >= 1";
    throw InputError(m.str());
  }
  std::shared_ptr<PreparedPlan> prepared(new PreparedPlan);
  PreparedPlan& P = *prepared;
  static std::atomic<std::uint64_t> next_id{1};
  P.id_ = cached ? next_id.fetch_add(1, std::memory_order_relaxed) : 0;
  P.engine_id_ = id_;
  P.label_ = plan.label;
  P.fractions_ = plan.number_of_fractions;
  P.beams_.reserve(plan.beams.size());
  for (const IonBeam& beam : plan.beams) {
    PreparedPlan::Beam& B = P.beams_.emplace_back();
    B.number = beam.number;
    B.name = beam.name;
    B.label = beam_label(beam);
    const std::string& label = B.label;
    if (options_.require_machine_name_match && !beam.machine_name.empty() && beam.machine_name != machine_.name())
      throw InputError(label + ": TreatmentMachineName '" + beam.machine_name + "' does not match the beam model '" +
                       machine_.name() + "' (" + machine_.source() + ")");
    B.gantry_angle_deg = beam.gantry_angle_deg;
    B.couch_angle_deg = beam.couch_angle_deg;
    B.isocenter_mm = beam.isocenter_mm;
    B.sad_x_mm = beam.vsad_x_mm.value_or(machine_.vsad_x_mm());
    B.sad_y_mm = beam.vsad_y_mm.value_or(machine_.vsad_y_mm());

    // Range shifters: their WET is used up before the patient, and their
    // scattering widens the spots by the drift to each depth.
    for (const RangeShifter& rs : beam.range_shifters) {
      if (!(rs.water_equivalent_thickness_mm > 0)) continue;
      if (!rs.isocenter_to_shifter_mm) {
        throw InputError(label + ": range shifter '" + rs.id +
                         "' has no IsocenterToRangeShifterDistance (300A,0364); the spot widening needs it");
      }
      B.shifter_wet_mm += rs.water_equivalent_thickness_mm;
      B.shifter_depth_mm = std::min(B.shifter_depth_mm, -*rs.isocenter_to_shifter_mm);
    }

    // Layers, in two passes: first each layer's physics (an energy outside
    // the beam model is reported before any spot), then its spots in protons,
    // validated (InputError naming the first bad spot, in plan order),
    // counted, with the energy they carry and their extent.
    struct Layer {
      const EnergyLayer* layer;
      std::shared_ptr<const LayerPhysics> physics;
      double protons_per_meterset;
    };
    std::vector<Layer> with_spots;  // in plan order, those that stop in the range shifter included
    for (const EnergyLayer& layer : beam.layers) {
      if (std::none_of(layer.spots.begin(), layer.spots.end(), [](const Spot& s) { return s.meterset > 0; })) continue;
      with_spots.push_back({&layer, layer_physics(layer.nominal_energy_mev, B.shifter_wet_mm),
                            beam.meterset_unit == MetersetUnit::kMonitorUnits
                                ? machine_.protons_per_mu(layer.nominal_energy_mev) : 1.0});
    }
    B.min_x_mm = B.min_y_mm = std::numeric_limits<double>::infinity();
    B.max_x_mm = B.max_y_mm = -std::numeric_limits<double>::infinity();
    auto layers = std::make_shared<std::vector<PreparedLayer>>();
    layers->reserve(with_spots.size());
    for (const Layer& W : with_spots) {
      PreparedLayer L;
      L.nominal_energy_mev = W.layer->nominal_energy_mev;
      L.physics = W.physics;
      L.cutoff_wepl_mm = W.physics->cutoff_wepl_mm;
      // One pass: the spots, their protons and extent, and a sum that is
      // finite unless a value is not (then validate_spots names the spot).
      L.spots.reserve(W.layer->spots.size());
      double protons = 0, finite_sum = 0;
      double min_x = std::numeric_limits<double>::infinity(), max_x = -min_x, min_y = min_x, max_y = -min_x;
      for (const Spot& s : W.layer->spots) {
        if (!(s.meterset > 0)) continue;
        const double n = s.meterset * W.protons_per_meterset;
        L.spots.push_back({s.x_mm, s.y_mm, n});
        protons += n;
        finite_sum += n + s.x_mm + s.y_mm;
        min_x = std::min(min_x, s.x_mm);
        max_x = std::max(max_x, s.x_mm);
        min_y = std::min(min_y, s.y_mm);
        max_y = std::max(max_y, s.y_mm);
      }
      if (!std::isfinite(finite_sum)) validate_spots(L.spots, label.c_str());
      B.spots += L.spots.size();
      B.carried_mev += protons * W.physics->carried_per_proton_mev;
      if (L.cutoff_wepl_mm <= 0) {
        spdlog::warn("{}: layer {:.2f} MeV stops in the range shifter (R80 {:.1f} mm, WET {:.1f} mm)", label,
                     L.nominal_energy_mev, W.physics->curve->r80_mm(), B.shifter_wet_mm);
        continue;
      }
      B.min_x_mm = std::min(B.min_x_mm, min_x);
      B.max_x_mm = std::max(B.max_x_mm, max_x);
      B.min_y_mm = std::min(B.min_y_mm, min_y);
      B.max_y_mm = std::max(B.max_y_mm, max_y);
      B.max_cutoff_mm = std::max(B.max_cutoff_mm, L.cutoff_wepl_mm);
      L.emittance[0] = layer_emittance(machine_, *W.layer, physics::Axis::kX, options_.spot_size_policy);
      L.emittance[1] = layer_emittance(machine_, *W.layer, physics::Axis::kY, options_.spot_size_policy);
      layers->push_back(std::move(L));
    }
    B.layers = std::move(layers);
    if (B.layers->empty()) {
      // A setup beam, or one whose layers all stop in the range shifter: its dose is exactly zero.
      spdlog::warn("{}: no spot with positive meterset reaches the patient; the beam adds no dose", label);
    } else {
      P.spots_ += B.spots;
    }
  }
  if (P.spots_ == 0)
    throw InputError("plan '" + plan.label + "': no beam has a spot with positive meterset that reaches the patient");
  P.preparation_s_ = seconds_since(t_start);
  return prepared;
}

namespace {

/// compute() of a plan (IonPlan or PreparedPlan) on a CT converted for the
/// call, its conversion in the timings.
template <class Plan>
DoseResult compute_on_converted_ct(const DoseEngine& engine, const CtImage& ct, const Plan& plan) {
  const std::shared_ptr<const PreparedCt> prepared = engine.prepare(ct);
  DoseResult r = engine.compute(*prepared, plan);
  r.timings.hu_conversion_s = prepared->conversion_s;
  r.timings.total_s += prepared->conversion_s;
  return r;
}

}  // namespace

DoseResult DoseEngine::compute(const CtImage& ct, const IonPlan& plan) const {
  return compute_on_converted_ct(*this, ct, plan);
}

DoseResult DoseEngine::compute(const CtImage& ct, const PreparedPlan& plan) const {
  return compute_on_converted_ct(*this, ct, plan);
}

DoseResult DoseEngine::compute(const PreparedCt& ct, const IonPlan& plan) const {
  // The plan is prepared for this computation only: the GPU executor stages
  // its beams without keeping them (id 0).
  const std::shared_ptr<const PreparedPlan> prepared = prepare_plan(plan, false);
  DoseResult r = compute(ct, *prepared);
  r.timings.plan_preparation_s = prepared->preparation_s();
  r.timings.dose_ready_s += prepared->preparation_s();
  r.timings.total_s += prepared->preparation_s();
  return r;
}

void DoseEngine::preload(const PreparedCt& ct) const {
  std::lock_guard<std::mutex> lock(compute_mutex_);
  executor_->set_patient(ct);
  executor_->synchronize();
}

/// The part of a layer's host tables that does not depend on the grid: its
/// spots, depth-dose curve and WEPL tables (stage_beam_layers and
/// layer_images both name them; the per-slice in-air σ and the scalars come
/// with the group).
static void set_beam_layer_tables(const PreparedLayer& L, std::size_t beam_layer, HostLayerTables& t) {
  t.beam_layer = static_cast<int>(beam_layer);
  t.spots = &L.spots;
  t.curve = &L.physics->curve_nodes;
  t.energy_mev = &L.physics->residual_energy_mev;
  t.scattering_factor = &L.physics->scattering_factor;
  if (L.physics->has_halo) {
    t.halo_weight = &L.physics->halo_weight;
    t.halo_sigma_mm = &L.physics->halo_sigma_mm;
  }
}

DoseResult DoseEngine::compute(const PreparedCt& ct, const PreparedPlan& plan) const {
  std::lock_guard<std::mutex> lock(compute_mutex_);
  const auto t_start = Clock::now();
  if (plan.engine_id_ != id_)
    throw ConfigError("plan '" + plan.label() + "' was prepared by another engine; prepare it with this one "
                      "(DoseEngine::prepare_plan): its tables follow the engine's beam model and options");
  DoseResult result;
  result.backend = options_.backend;
  result.superposition_method = method_name(superposition_method(options_.backend, options_.tensor_core_scatter));
  result.quantity = options_.quantity;
  result.rbe_factor = options_.rbe_factor;
  result.fractions = plan.fractions();
  result.energy_balance_tolerance = options_.energy_balance_tolerance;
  const PatientPosition position = parse_patient_position(ct.patient_position);
  const Grid3& og = ct.out_grid;
  const double voxel_cm3 = og.spacing_mm[0] * og.spacing_mm[1] * og.spacing_mm[2] / 1000.0;
  const bool to_water = options_.quantity == DoseQuantity::kDoseToWater;
  BeamExecutor& exec = *executor_;
  exec.set_patient(ct);
  HostTimeline::mark("plan: begin");
  exec.begin_plan(og);
  HostTimeline::mark("plan: begun");
  auto t0 = Clock::now();
  const auto stage_done = [&](double& field) {
    exec.synchronize();
    field += seconds_since(t0);
    t0 = Clock::now();
  };

  for (std::size_t beam_index = 0; beam_index < plan.beams_.size(); ++beam_index) {
    const PreparedPlan::Beam& beam = plan.beams_[beam_index];
    t0 = Clock::now();
    const std::string& label = beam.label;
    BeamDose bd;
    bd.beam_number = beam.number;
    bd.beam_name = beam.name;
    const std::vector<PreparedLayer>& prepared_layers = *beam.layers;
    if (prepared_layers.empty()) {
      if (options_.keep_per_beam) bd.dose_gy = Volume<float>(og, 0.0f);
      result.beams.push_back(std::move(bd));
      continue;
    }
    const BeamFrame frame(beam.gantry_angle_deg, beam.couch_angle_deg, beam.isocenter_mm, position);
    const double shifter_wet_mm = beam.shifter_wet_mm;
    const double shifter_depth_mm = beam.shifter_depth_mm;
    bd.spots = beam.spots;
    bd.energy.carried_mev = beam.carried_mev;
    std::vector<LayerWork> layers(prepared_layers.size());
    for (std::size_t li = 0; li < layers.size(); ++li) layers[li].prepared = &prepared_layers[li];
    bd.layers = layers.size();

    // The depth range of the CT along this beam, and a first lateral margin.
    double ct_begin_mm = 0, ct_end_mm = 0;
    box_depth_range(ct.ct_grid, frame, ct_begin_mm, ct_end_mm);
    double max_air_sigma_mm = 0;
    for (const LayerWork& L : layers)
      for (double d : {ct_begin_mm, 0.0, ct_end_mm})
        for (physics::Axis a : {physics::Axis::kX, physics::Axis::kY})
          max_air_sigma_mm = std::max(max_air_sigma_mm, sigma_in_air(machine_, *L.prepared, a, d));
    const double mcs_estimate_mm = kMcsSigmaPerRangeEstimate * (beam.max_cutoff_mm + shifter_wet_mm) +
                                   (shifter_wet_mm > 0 ? 0.02 * (ct_end_mm - shifter_depth_mm) : 0.0);
    double margin_mm = options_.cutoff_sigmas * std::hypot(max_air_sigma_mm, mcs_estimate_mm) +
                       2 * options_.ray_pitch_mm;
    const kernels::Affine3 beam_from_out_index = beam_from_voxel_index(og, frame);
    result.timings.beam_setup_s += seconds_since(t0);

    BevGrid grid;
    std::size_t total_stack_slices = 0;
    double expected_mev = 0;
    for (int attempt = 0;; ++attempt) {
      t0 = Clock::now();
      BevGridSpec spec;
      spec.spot_min_x_mm = beam.min_x_mm;
      spec.spot_max_x_mm = beam.max_x_mm;
      spec.spot_min_y_mm = beam.min_y_mm;
      spec.spot_max_y_mm = beam.max_y_mm;
      spec.margin_x_mm = spec.margin_y_mm = margin_mm;
      spec.pitch_x_mm = spec.pitch_y_mm = options_.ray_pitch_mm;
      spec.sad_x_mm = beam.sad_x_mm;
      spec.sad_y_mm = beam.sad_y_mm;
      spec.depth_begin_mm = ct_begin_mm;
      spec.depth_end_mm = ct_end_mm;
      spec.depth_step_mm = options_.depth_step_mm;
      const BevGrid full = make_bev_grid(spec);
      full.validate("ray tracing");
      const kernels::BevGeometry full_geometry = geometry_of(full);
      HostTimeline::mark("beam: layers and grid set up");
      // Each layer's in-air σ at every slice of the full grid (the crop takes
      // its slices), on the engine's set-up thread while this one launches
      // the trace and stages the layers, and the GPU traces: on this thread,
      // the tables were ~60–90 µs more before the layer kernel could start
      // (H100 hosts). Joined before anything can unwind past `layers`.
      std::future<void> air_tables = setup_thread_.run([this, &full, &layers] {
        for (LayerWork& L : layers) air_sigma_on_full_grid(machine_, full, L);
        HostTimeline::mark("set-up thread: in-air tables");
      });
      struct Join {
        std::future<void>& f;
        ~Join() {
          if (f.valid()) f.wait();
        }
      } join_air_tables{air_tables};
      std::vector<double> cutoffs;
      for (const LayerWork& L : layers) cutoffs.push_back(L.prepared->cutoff_wepl_mm);
      exec.start_trace(full_geometry, ct_index_from_beam(ct.ct_grid, frame), cutoffs);
      HostTimeline::mark("beam: trace launched");
      // The GPU executor's staging threads read the prepared layers (their
      // spots and tables) until its first layer_images: an error between
      // here and there (a beam that misses the patient, a failed read-back)
      // waits for them before it unwinds, so that the caller may free the
      // prepared plan at once.
      struct StagedLayersGuard {
        BeamExecutor& exec;
        ~StagedLayersGuard() { exec.wait_staged_layers(); }
      } staged_layers_guard{exec};
      {
        // What of the layers does not depend on the grid: a GPU executor
        // that kept this beam of this plan in device memory has nothing to
        // do; otherwise it packs and uploads it while the trace runs.
        std::vector<HostLayerTables> staged(layers.size());
        for (std::size_t li = 0; li < layers.size(); ++li) set_beam_layer_tables(prepared_layers[li], li, staged[li]);
        exec.stage_beam_layers(staged, StagedBeamKey{plan.id(), beam_index});
      }
      HostTimeline::mark("beam: layers staged");
      // The spots' spreading depends only on the rays' lateral layout and the
      // spread σ (taken over the full grid): the GPU executor queues it
      // behind the trace, and it runs while this thread crops.
      get_polled(air_tables);  // rethrows what the tables threw
      HostTimeline::mark("beam: in-air tables joined");
      {
        std::vector<double> spread_sigma_iso_mm;
        for (const LayerWork& L : layers) {
          spread_sigma_iso_mm.push_back(L.spread_sigma_x_iso_mm);
          spread_sigma_iso_mm.push_back(L.spread_sigma_y_iso_mm);
        }
        exec.spread_beam_fluence(full_geometry, spread_sigma_iso_mm, options_.cutoff_sigmas);
      }
      HostTimeline::mark("beam: fluence spreading queued");
      const TraceSummary traced = exec.trace_summary();
      HostTimeline::mark("beam: trace summary back");
      // Crop: from where the first ray meets material (dose to water is
      // reported in the air of the CT too, as the Monte Carlo references do)
      // to where the last pencil passes its range cut-off.
      if (traced.entry_slice < 0)
        throw InputError(label + ": no ray of the beam's field meets the patient in the CT (density >= 0.05 g/cm3)");
      check_trace_summary(traced, layers.size(), full.slices);
      const int first = traced.first_material_slice;
      const std::vector<int>& needed = traced.slices_before_cutoff;
      int slices = 1;
      for (std::size_t li = 0; li < layers.size(); ++li) {
        layers[li].slices = std::max(needed[li], 1);
        slices = std::max(slices, layers[li].slices);
      }
      grid = full;
      grid.depth0_mm = full.depth_mm(first);
      grid.slices = slices;
      // The trace is done (trace_summary waited for it); a synchronisation
      // here would wait for the spreading queued behind it too, which runs
      // while this thread crops.
      result.timings.ray_tracing_s += seconds_since(t0);
      t0 = Clock::now();

      for (LayerWork& L : layers) crop_air_sigma(L, first);
      const std::size_t plane = grid.rays();
      const kernels::BevGeometry geometry = geometry_of(grid);
      const double grid_start_depth_mm = grid.depth_mm(0) - 0.5 * grid.depth_step_mm;

      // The layers' slices form one stack and one superposition per beam, unless
      // the stack would exceed the budget: then consecutive groups of layers
      // (logged), each a superposition of its own.
      std::vector<std::size_t> group_starts{0};
      {
        std::size_t pixels = 0;
        for (std::size_t li = 0; li < layers.size(); ++li) {
          const std::size_t layer_pixels = static_cast<std::size_t>(layers[li].slices) * plane;
          if (pixels > 0 && pixels + layer_pixels > stack_pixel_budget_) {
            group_starts.push_back(li);
            pixels = 0;
          }
          pixels += layer_pixels;
        }
      }
      if (group_starts.size() > 1)
        spdlog::info("{}: the superposition stack exceeds {} M pixels; {} groups of layers", label,
                     stack_pixel_budget_ >> 20, group_starts.size());
      HostTimeline::mark("beam: cropped, groups planned");
      exec.begin_bev(grid.pixel_count());
      exec.begin_beam();
      HostTimeline::mark("beam: BEV dose begun");
      expected_mev = 0;
      total_stack_slices = 0;
      bd.separable_slices = 0;  // a widened retry starts over
      bool widen = false;
      result.timings.beam_setup_s += seconds_since(t0);
      for (std::size_t g = 0; g < group_starts.size() && !widen; ++g) {
        t0 = Clock::now();
        const std::size_t group_begin = group_starts[g];
        const std::size_t group_end = g + 1 < group_starts.size() ? group_starts[g + 1] : layers.size();
        std::size_t stack_slices = 0;
        std::vector<HostLayerTables> tables(group_end - group_begin);
        for (std::size_t li = group_begin; li < group_end; ++li) {
          LayerWork& L = layers[li];
          L.stack_offset = stack_slices;
          stack_slices += static_cast<std::size_t>(L.slices);
          HostLayerTables& t = tables[li - group_begin];
          set_beam_layer_tables(*L.prepared, li, t);
          const DoseEngine::LayerPhysics& P = *L.prepared->physics;
          t.scalars.curve_inv_uniform_step_mm = P.curve->uniform_step_mm() > 0 ? 1.0 / P.curve->uniform_step_mm() : 0.0;
          kernels::LayerScalars& sc = t.scalars;
          if (P.has_halo) {
            sc.halo_max_wepl_mm = P.halo_max_wepl_mm;
            sc.halo_sigma_is_added = P.halo_sigma_is_added;
          }
          t.air_sigma_x_mm = &L.air_sigma_x_mm;
          t.air_sigma_y_mm = &L.air_sigma_y_mm;
          sc.inv_wepl_step_mm = 1.0 / kEnergyTableStepMm;
          sc.spread_sigma_x_iso_mm = L.spread_sigma_x_iso_mm;
          sc.spread_sigma_y_iso_mm = L.spread_sigma_y_iso_mm;
          sc.shifter_wet_mm = shifter_wet_mm;
          sc.cutoff_wepl_mm = L.prepared->cutoff_wepl_mm;
          if (shifter_wet_mm > 0) {
            sc.has_shifter = true;
            sc.shifter_a0_rad2 = P.shifter_exit.a0_rad2;
            sc.shifter_a1_rad_mm = P.shifter_exit.a1_rad_mm;
            sc.shifter_a2_mm2 = P.shifter_exit.a2_mm2;
            sc.shifter_drift_depth_mm = grid_start_depth_mm - shifter_depth_mm;
          }
          sc.slices = L.slices;
          sc.stack_offset = L.stack_offset;
        }
        total_stack_slices += stack_slices;
        result.timings.beam_setup_s += seconds_since(t0);
        t0 = Clock::now();

        kernels::LayerStackArgs args{};
        args.grid = geometry;
        args.trace_first_slice = first;
        args.dose_to_water = to_water;
        // The halo grid's nominal factor (coarse pixel width in rays), known
        // before the layer images: the GPU's layer kernel sums the halo over
        // column groups that tile it.
        const int halo_nominal_factor =
            std::max(1, static_cast<int>(std::lround(options_.effective_halo_pitch_mm() / grid.pitch_x_mm)));
        args.halo_column_bin = options_.nuclear_halo ? kernels::halo_column_bin(halo_nominal_factor) : 1;
        args.cutoff_sigmas = static_cast<float>(options_.cutoff_sigmas);
        args.spot_cutoff_sigmas = options_.cutoff_sigmas;
        HostTimeline::mark("layers: tables built");
        const LayerImagesSummary images = exec.layer_images(args, stack_slices, tables, options_.nuclear_halo);
        stage_done(result.timings.layer_images_s);
        HostTimeline::mark("layers: stage timed");
        if (images.overshoot_px > 0 && attempt == 0) {
          // A kernel reaches past the grid edge: widen and redo rather than clip.
          const double m_max = std::max(grid.magnification_x(grid.depth_mm(grid.slices - 1)), 1.0);
          margin_mm += (images.overshoot_px + 2) * options_.ray_pitch_mm * m_max;
          spdlog::info("{}: kernels reach {} px past the BEV grid; widening the margin to {:.1f} mm", label,
                       images.overshoot_px, margin_mm);
          widen = true;
          break;
        }
        expected_mev += images.energy_mev;

        // The nuclear halo of a beam and the superposition of the group's
        // whole stack: independent of each other once the layer images exist,
        // so the halo starts first and may run alongside (GPU executor).
        const bool with_halo = options_.nuclear_halo && images.max_halo_variance_mm2 > 0;
        double halo_call_s = 0;  // start_halo's own time: the whole halo when it ran at once
        if (with_halo) {
          // The nuclear halo of a beam: the halo shares of the input pixels are
          // summed into blocks of a coarse BEV grid (pitch ≈ halo_pitch_mm,
          // padded by the widest halo kernel so nothing is clipped), superposed
          // there with the halo σ, and resampled onto the dose grid like the core dose.
          const double first_d = grid.depth_mm(0), last_d = grid.depth_mm(grid.slices - 1);
          const double m_min = std::min({grid.magnification_x(first_d), grid.magnification_y(first_d),
                                         grid.magnification_x(last_d), grid.magnification_y(last_d)});
          // Coarse pitch: halo_pitch_mm, or coarser where the widest halo kernel
          // would otherwise exceed the tile scatter's radius (kMaxTileRadiusPx)
          // and fall to its slow general path (the fitted halo reaches σ ≈ 50 mm
          // at 170 MeV: 12 px at 4 mm, r = 37).
          const double widest_halo_mm = std::sqrt(images.max_halo_variance_mm2);
          const int f_tile = static_cast<int>(std::ceil(options_.cutoff_sigmas * widest_halo_mm /
                                                        (kMaxTileRadiusPx * std::min(grid.pitch_x_mm, grid.pitch_y_mm) * m_min)));
          const int f = kernels::halo_factor(halo_nominal_factor, f_tile, args.halo_column_bin);
          const int reach = static_cast<int>(std::ceil(options_.cutoff_sigmas * std::sqrt(images.max_halo_variance_mm2) /
                                                       (f * std::min(grid.pitch_x_mm, grid.pitch_y_mm) * m_min))) + 1;
          const HaloPads pads = halo_pads(grid, f, reach, beam_from_out_index, og.size);
          const BevGrid hg = halo_grid(grid, f, pads);
          const kernels::HaloBinning binning{f,         pads.cols_before, pads.rows_before, grid.cols,
                                             grid.rows, hg.cols,          hg.rows,          args.halo_column_bin};
          spdlog::debug("{}: halo grid {}x{} at {:.1f} mm (reach {}, pads {}/{} before, {}/{} after; {} rays per "
                        "column sum), {} stack slices, widest halo sigma {:.1f} mm",
                        label, hg.cols, hg.rows, hg.pitch_x_mm, reach, pads.cols_before, pads.rows_before,
                        pads.cols_after, pads.rows_after, args.halo_column_bin, stack_slices,
                        std::sqrt(images.max_halo_variance_mm2));
          HostTimeline::mark("halo: grid sized");
          const auto t_halo = Clock::now();
          exec.start_halo(geometry, geometry_of(hg), binning, stack_slices, tables, beam_from_out_index);
          halo_call_s = seconds_since(t_halo);
        }
        try {
          HostTimeline::mark("superposition: core starts");
          bd.separable_slices += exec.superpose_stack(geometry, stack_slices, tables);
          HostTimeline::mark("superposition: core done");
        } catch (...) {
          // A halo running alongside works in the executor's buffers, which
          // the next computation reuses: it ends before the error goes on.
          try {
            exec.wait_halo();
          } catch (...) {
          }
          throw;
        }
        const std::optional<double> halo_alongside_s = exec.wait_halo();
        HostTimeline::mark("superposition: halo awaited");
        stage_done(result.timings.superposition_s);
        // Run at once, the halo is a stage of its own; run alongside, the
        // superposition stage is the wall time of both, and the halo's own
        // time overlaps it.
        result.timings.nuclear_halo_s += halo_alongside_s.value_or(halo_call_s);
        if (!halo_alongside_s) result.timings.superposition_s -= halo_call_s;
      }
      if (widen) continue;
      break;
    }
    bd.energy.expected_mev = expected_mev;
    bd.bev_pixels = total_stack_slices * grid.rays();
    bd.stack_slices = total_stack_slices;
    bd.bev_size = {grid.cols, grid.rows, grid.slices};

    // Resampling, with the beam's dose check and its addition to the plan
    // (one pass on the GPU): the resampling stage.
    t0 = Clock::now();
    const double plan_scale = options_.rbe_factor.value_or(1.0);
    const BeamDoseCheck check =
        exec.finish_beam(geometry_of(grid), beam_from_out_index, to_water,
                         beam_index + 1 == plan.beams_.size() ? std::optional<double>(plan_scale) : std::nullopt);
    stage_done(result.timings.resampling_s);
    if (check.first_bad_voxel >= 0) throw_bad_dose(og, check.first_bad_voxel, check.bad_value, label);
    bd.energy.deposited_mev = check.dose_times_density * voxel_cm3 / kGyPerMevPerGram;
    spdlog::info("{}: {} layers, {} spots, BEV {}x{}x{} ({} stack slices, {} of them separable); energy carried "
                 "{:.4g} MeV, in the patient {:.4g} MeV, deposited on the dose grid {:.4g} MeV ({:+.2f} %)",
                 label, bd.layers, bd.spots, grid.cols, grid.rows, grid.slices, total_stack_slices, bd.separable_slices,
                 bd.energy.carried_mev, bd.energy.expected_mev, bd.energy.deposited_mev,
                 100 * bd.energy.relative_difference());
    if (std::abs(bd.energy.relative_difference()) > options_.energy_balance_tolerance) {
      std::ostringstream m;
      m << label << ": energy balance violated: " << bd.energy.deposited_mev << " MeV deposited on the dose grid vs "
        << bd.energy.expected_mev << " MeV in the pencils (" << 100 * bd.energy.relative_difference()
        << " %; tolerance +/- " << 100 * options_.energy_balance_tolerance << " %)";
      throw NumericalError(m.str());
    }
    result.energy.carried_mev += bd.energy.carried_mev;
    result.energy.expected_mev += bd.energy.expected_mev;
    result.energy.deposited_mev += bd.energy.deposited_mev;
    result.spots += bd.spots;
    stage_done(result.timings.checks_s);
    if (options_.keep_per_beam) {
      bd.dose_gy = exec.beam_dose();
      if (options_.rbe_factor)
        for (float& v : bd.dose_gy.data) v = static_cast<float>(v * *options_.rbe_factor);
      stage_done(result.timings.download_s);
    }
    result.beams.push_back(std::move(bd));
  }

  t0 = Clock::now();
  const PlanDoseSummary summary = exec.finish_plan(options_.rbe_factor.value_or(1.0));
  if (summary.first_bad_voxel >= 0)
    throw_bad_dose(og, summary.first_bad_voxel, summary.bad_value, "plan '" + plan.label() + "'");
  result.max_dose_gy = summary.max_dose;
  stage_done(result.timings.checks_s);
  HostTimeline::mark("plan: dose ready");
  result.timings.dose_ready_s = seconds_since(t_start);
  result.dose_gy = exec.plan_dose();
  stage_done(result.timings.download_s);
  result.timings.total_s = seconds_since(t_start);
  return result;
}

}  // namespace protondose::engine
