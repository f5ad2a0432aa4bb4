#pragma once
/// \file dose_engine.h
/// The dose engine: CT + RT Ion Plan → absolute dose (Gy), by the divergent
/// beam's-eye-view kernel-superposition method of da Silva, Ansorge & Jena
/// (PMB 60:4777, 2015). Per beam: ray tracing through the CT (ray_trace.h),
/// per energy layer the fluence of the spots on the rays (spot_fluence.h), an
/// input image from the cumulative depth dose and a σ-map from the in-air optics
/// and Fermi–Eyges multiple scattering, one kernel superposition of the whole
/// stack (gpu/superposition.h), trilinear resampling onto the dose grid
/// (resample.h); beams are summed. docs/engine.md describes the model.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protondose/core/grid.h"
#include "protondose/core/plan.h"
#include "protondose/core/task_thread.h"
#include "protondose/gpu/superposition.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"
#include "protondose/physics/nuclear_halo.h"
#include "protondose/physics/scattering.h"

namespace protondose::engine {

class BeamExecutor;

/// Where the kernel superposition runs.
enum class Backend {
  kCpu,        ///< CPU reference superposition (double precision)
  kGpu,        ///< CUDA shared-memory tile scatter
  kGpuGather,  ///< CUDA exact gather (the GPU oracle)
};

/// "cpu", "gpu", "gpu-gather".
const char* backend_name(Backend backend);
/// Parses a backend name; throws ConfigError listing the accepted names.
Backend parse_backend(const std::string& name);
/// The superposition method a backend uses.
SuperpositionMethod superposition_method(Backend backend, bool tensor_core_scatter = true);
/// True when the GPU scatter superposer can be created in this build and on
/// this machine; otherwise false with the reason (the UnavailableError message)
/// in `why_not`. Used for an explicit, logged default choice — never as a
/// fallback after a failure.
bool gpu_backend_usable(std::string* why_not = nullptr);

/// Which dose the engine reports.
enum class DoseQuantity {
  /// Dose to water: energy per water-equivalent mass of each step (the
  /// convention of the MCsquare references and most proton TPSs),
  /// D_w = D_m · ρ / RSP.
  kDoseToWater,
  /// Dose to medium: energy per mass ρ·Δs of each step.
  kDoseToMedium,
};
const char* dose_quantity_name(DoseQuantity quantity);

struct DoseEngineOptions {
  Backend backend = Backend::kCpu;
  double ray_pitch_mm = 1.0;     ///< ray spacing at the isocentre plane (mm, > 0)
  double depth_step_mm = 1.0;    ///< BEV slice thickness along the axis (mm, > 0)
  double cutoff_sigmas = 3.0;    ///< n_σ of the fluence spreading and of the kernels, (0, 10]
  /// GPU backend: stack slices whose σ is uniform (homogeneous water, parallel
  /// beam) run as separable convolutions instead of the scatter — the same sum
  /// (SuperpositionOptions::separable_uniform_slices). False forces the scatter.
  bool separable_uniform_slices = true;
  /// GPU backend: the scatter of the other slices runs on the tensor cores
  /// (SuperpositionMethod::kGpuScatterTensorCore; radii below
  /// kTensorCoreMinRadiusPx stay on the tile scatter). False: the paper's tile
  /// scatter for every radius (kGpuScatterTiled), for comparisons.
  bool tensor_core_scatter = true;
  /// With tensor_core_scatter: the smallest kernel radius (pixels) whose tiles
  /// run on the tensor cores; smaller ones stay on the tile scatter
  /// (SuperpositionOptions::tensor_core_min_radius_px).
  int tensor_core_min_radius_px = kTensorCoreMinRadiusPx;
  /// Pencils stop at WEPL = range_cutoff_factor × R80 of the layer (or the end
  /// of the depth-dose table, whichever comes first), ≥ 1.
  double range_cutoff_factor = 1.05;
  /// Output grid spacing (mm) over the CT's extent; absent: the CT grid.
  std::optional<double> output_spacing_mm;
  DoseQuantity quantity = DoseQuantity::kDoseToWater;
  bool keep_per_beam = false;    ///< also return each beam's dose
  /// Constant RBE to multiply the physical dose by (absent: physical dose).
  std::optional<double> rbe_factor;
  /// Spot size: the plan's ScanningSpotSize at the isocentre (when stated) or the model's.
  physics::SpotSizePolicy spot_size_policy = physics::SpotSizePolicy::kPlanSpotSizeAtIsocentre;
  /// Scattering power of the Fermi–Eyges σ; the physics default (docs/validation/lateral-spread.md:
  /// within 0.2 mm or 5 % of the MC core σ at 70–200 MeV, and best of the three at 230 MeV).
  physics::ScatteringPowerModel scattering_model = physics::ScatteringPowerModel::kFermiRossiHighland;
  physics::HuCoveragePolicy hu_policy = physics::HuCoveragePolicy::kError;
  /// The nuclear halo as a second, wide Gaussian on a coarse grid
  /// (physics/nuclear_halo.h; da Silva et al., Front Oncol 5:281, 2015).
  bool nuclear_halo = true;
  /// Which halo: the MCsquare-fitted default, or Soukup, Fippel & Alber, PMB
  /// 50:5089 (2005), whose width adds σ_N in quadrature to each pencil's own
  /// core width (docs/physics/nuclear-halo.md, docs/validation/nuclear-halo.md).
  physics::HaloModel halo_model = physics::kDefaultHaloModel;
  /// Pitch of the halo's coarse grid at the isocentre plane (mm, (0, 20]); the
  /// engine widens it where the widest halo kernel would exceed the tile
  /// scatter's radius. Unset: 8 mm for the fitted halo (σ ≥ 8 mm: against 4 mm,
  /// ≤ 0.17 % of D_max on single spots and 3 × 3 fields at 100–220 MeV, and the
  /// same Monte Carlo regression scores; docs/engine.md), 4 mm for Soukup's
  /// narrower one.
  std::optional<double> halo_pitch_mm;
  double effective_halo_pitch_mm() const {
    return halo_pitch_mm.value_or(halo_model == physics::HaloModel::kSoukup2005 ? 4.0 : 8.0);
  }
  /// A beam whose TreatmentMachineName differs from the beam model's name is an
  /// InputError unless this is false.
  bool require_machine_name_match = true;
  /// Memory (bytes) one superposition stack may take at 24 bytes per pixel
  /// (image, σ-maps, output, halo shares). A beam whose layers need more is
  /// superposed in consecutive groups of layers (logged); a single layer is
  /// never split. Unset: 2 GiB of host memory on the CPU backend; on GPU
  /// backends what fits in 80 % of the device memory free when the engine was
  /// created (36 bytes per pixel there: the deterministic accumulator and the separable
  /// passes' intermediate included).
  std::optional<std::size_t> max_stack_bytes;
  /// Largest accepted |deposited − expected| / expected of the energy balance.
  double energy_balance_tolerance = 0.02;
  int threads = 0;  ///< CPU worker threads (0 = default_thread_count())
  int gpu_device = 0;  ///< GPU backends: the CUDA device index to run on (≥ 0)
  /// GPU backends: the share (0, 1] of the device memory free at creation that
  /// this engine sizes its stacks for. Engines that run at the same time on
  /// one device (batch and robust workers sharing a GPU) get 1/n each, so that
  /// together they stay within it.
  double gpu_memory_share = 1.0;
  /// Testing only, CPU backend only: the layer images (input images and
  /// σ-maps) in the GPU backends' single precision instead of double, so that
  /// a machine without a GPU can measure what float costs in dose. Off, the
  /// CPU backend is the double-precision oracle.
  bool cpu_float_layer_images_for_testing = false;

  /// Throws ConfigError naming the option and value when one is out of range.
  void validate() const;
};

/// Wall-clock seconds by stage, summed over beams.
struct StageTimings {
  double hu_conversion_s = 0;   ///< HU → RSP/density (prepare()); 0 for a prepared CT
  /// The plan checked and converted (prepare_plan()); 0 for a prepared plan.
  double plan_preparation_s = 0;
  double beam_setup_s = 0;      ///< host: layers, grid, spot fluence, per-layer tables
  double ray_tracing_s = 0;     ///< until the trace's summary is back
  /// Input images and σ-maps (on the GPU with the spots' spreading, queued
  /// behind the trace, if it is still running).
  double layer_images_s = 0;
  double superposition_s = 0;
  /// Halo: coarse images, its superposition and (CPU) resampling. On the GPU
  /// it runs alongside the superposition (its own time, overlapping
  /// superposition_s, which is then the wall time of both), and its last
  /// coarse dose is resampled in the core's resampling pass.
  double nuclear_halo_s = 0;
  /// BEV dose → dose grid, with each beam's dose check and its addition to
  /// the plan dose (one pass on the GPU).
  double resampling_s = 0;
  double checks_s = 0;  ///< energy balance, the plan dose's scale and check
  double download_s = 0;        ///< GPU backends: the dose volume(s) copied to host memory
  /// From the start of compute() on a prepared CT to the plan dose complete
  /// in the executor's memory (device memory on GPU backends): the engine's
  /// time without the CT conversion, the copy back and the final host check;
  /// on a prepared plan, from the plan in (device) memory, else with the
  /// plan's preparation.
  double dose_ready_s = 0;
  double total_s = 0;
};

/// A CT converted for one engine: RSP and mass density on the CT grid and on
/// the output grid, and the scattering-length table of its density range.
/// Reusable across compute() calls of the engine that prepared it, and of
/// engines that would prepare it identically (DoseEngine::compute); immutable
/// once prepared. On a GPU backend each engine keeps the volumes of the CTs it
/// used last on its device, so a run of plans (scenarios, batch jobs) on one
/// prepared CT uploads it once per engine.
struct PreparedCt {
  Grid3 ct_grid;
  std::string patient_position;
  Volume<float> rsp, density;          ///< CT grid
  Grid3 out_grid;  ///< the output dose grid
  /// RSP and density resampled on out_grid for the energy balance; empty when
  /// out_grid is the CT grid (then rsp and density serve, with no copy).
  Volume<float> out_rsp, out_density;
  const Volume<float>& output_rsp() const { return out_rsp.data.empty() ? rsp : out_rsp; }
  const Volume<float>& output_density() const { return out_density.data.empty() ? density : out_density; }
  /// 1/X(ρ) (cm²/g) of the scattering model's length X on ρ = i·density_step_g_cm3.
  std::vector<double> inverse_length_table;
  double density_step_g_cm3 = 1e-3;
  double rsp_scale = 1.0;  ///< the range scenario's RSP factor it was prepared with
  std::uint64_t id = 0;  ///< unique in the process: what device caches key on
  double conversion_s = 0;
};

/// A plan checked and converted by one engine (DoseEngine::prepare_plan),
/// whatever the CT: each beam's energy layers with their physics tables
/// (depth-dose curve, residual energy, scattering power, halo), its spots
/// validated and in protons, and what the beam's grid needs of them (their
/// extent, the layers' cut-offs and emittances). compute() on it starts with
/// the beam's geometry and the ray tracing. One prepared plan serves every CT
/// it is computed on — the scenarios of a robustness evaluation, the CTs of an
/// adaptive series. On a GPU backend the engine keeps the spots and tables of
/// the beams it computed last in device memory, keyed by the plan's id (as it
/// keeps prepared CTs), so that a warm engine computes from the plan in device
/// memory. Immutable once prepared; usable only by the engine that prepared
/// it (the tables follow its options and beam model).
class PreparedPlan {
 public:
  struct Beam;  ///< engine-private (dose_engine.cpp)
  ~PreparedPlan();
  PreparedPlan(const PreparedPlan&) = delete;
  PreparedPlan& operator=(const PreparedPlan&) = delete;

  const std::string& label() const { return label_; }
  int fractions() const { return fractions_; }
  std::size_t beam_count() const;
  /// Positive-meterset spots of the beams that reach the patient.
  std::size_t spots() const { return spots_; }
  /// Unique in the process to the plan's spots and tables: what the GPU
  /// executor's device cache keys on (a shifted() plan keeps it).
  std::uint64_t id() const { return id_; }
  double preparation_s() const { return preparation_s_; }

  /// This plan with the patient moved by shift_mm (a setup error): every
  /// isocentre moved by −shift_mm, as shifted_plan (batch.h) moves a plan's.
  /// It shares this plan's layers, spots and tables (and its id: on a GPU
  /// backend, the device copies of its beams), so that the scenarios of a
  /// robustness evaluation cost one preparation.
  std::shared_ptr<const PreparedPlan> shifted(const Vec3& shift_mm) const;

 private:
  friend class DoseEngine;
  PreparedPlan();
  std::string label_;
  int fractions_ = 1;
  std::size_t spots_ = 0;
  std::uint64_t id_ = 0;
  std::uint64_t engine_id_ = 0;  ///< the DoseEngine that prepared it
  double preparation_s_ = 0;
  std::vector<Beam> beams_;  ///< in plan order
};

/// Converts a CT as an engine with this HU curve and these options would
/// (DoseEngine::prepare, which calls it): host work only, so a one-shot
/// process can convert its CT while the GPU starts on another thread, before
/// the engine exists. Reads options.threads, hu_policy, output_spacing_mm and
/// scattering_model.
std::shared_ptr<const PreparedCt> prepare_ct(const CtImage& ct, const physics::HuCurve& hu_curve,
                                             const DoseEngineOptions& options, double rsp_scale = 1.0);

/// The CT of a range scenario from the nominal one (prepared at rsp_scale 1):
/// bitwise what prepare_ct would give at rsp_scale, without converting the
/// HU again (robustness scenarios: one conversion for all range errors).
/// ConfigError for a scale that is not finite and > 0.
std::shared_ptr<const PreparedCt> rescaled_ct(const PreparedCt& nominal, double rsp_scale);

/// Energy bookkeeping of one beam or a plan (MeV per fraction).
struct EnergyBalance {
  /// Energy the spots would deposit if stopped in water (protons × total CIDD).
  double carried_mev = 0;
  /// Energy in the BEV input images: what the pencils deposit inside the CT
  /// before the range cut-off — the engine's expected total.
  double expected_mev = 0;
  /// Σ dose × mass over the output grid (for dose to water, mass = RSP·ρ_w·V).
  double deposited_mev = 0;
  /// (deposited − expected) / expected.
  double relative_difference() const { return expected_mev > 0 ? (deposited_mev - expected_mev) / expected_mev : 0.0; }
};

struct BeamDose {
  int beam_number = 0;
  std::string beam_name;
  Volume<float> dose_gy;  ///< per fraction (empty unless keep_per_beam)
  EnergyBalance energy;
  std::size_t spots = 0;
  std::size_t layers = 0;
  std::size_t bev_pixels = 0;  ///< pixels of the superposition stack(s)
  std::array<int, 3> bev_size{0, 0, 0};  ///< BEV cols, rows, slices
  std::size_t stack_slices = 0;      ///< slices of the superposition stack(s), all layers
  /// Of those, the slices whose σ was uniform and ran as separable passes
  /// (SuperpositionOptions::separable_uniform_slices; 0 on the CPU backend).
  std::size_t separable_slices = 0;
};

struct DoseResult {
  /// Dose per fraction (Gy, or Gy(RBE) when rbe_factor is set) on the output grid.
  Volume<float> dose_gy;
  int fractions = 1;  ///< NumberOfFractionsPlanned: plan dose = fractions × dose_gy
  DoseQuantity quantity = DoseQuantity::kDoseToWater;
  std::optional<double> rbe_factor;
  std::vector<BeamDose> beams;
  StageTimings timings;
  EnergyBalance energy;
  double energy_balance_tolerance = 0;
  Backend backend = Backend::kCpu;
  std::string superposition_method;
  std::size_t spots = 0;
  double max_dose_gy = 0;  ///< per fraction
};

/// The engine. Holds the beam model, the HU curve, the superposer and a cache of
/// depth-dose curves by energy, so repeated compute() calls stay warm.
/// compute() is safe to call from one thread at a time.
class DoseEngine {
 public:
  /// Validates the options (ConfigError) and creates the superposer for the
  /// backend: UnavailableError when that backend cannot run here (never a
  /// silent fallback to another backend).
  DoseEngine(physics::BeamModel machine, physics::HuCurve hu_curve, DoseEngineOptions options);
  ~DoseEngine();

  /// Dose of `plan` on `ct`. Throws InputError for a plan the engine cannot
  /// use (unknown machine name, energy outside the model, empty beam, patient
  /// position not supported), ConfigError for an invalid output grid and
  /// NumericalError when the result has NaN/Inf/negative dose or violates the
  /// energy balance.
  DoseResult compute(const CtImage& ct, const IonPlan& plan) const;
  /// The same on a CT prepared by this engine (prepare()), or by another engine
  /// with the same HU curve, output_spacing_mm, hu_policy and scattering_model
  /// (all that prepare() reads besides threads): the PreparedCt is only read,
  /// and each engine's executor keeps its own device copy keyed by
  /// PreparedCt::id, so several engines may compute on one PreparedCt at once.
  DoseResult compute(const PreparedCt& ct, const IonPlan& plan) const;
  /// The same from a plan this engine prepared (prepare_plan): the plan's
  /// checks and spot handling are done, and on a GPU backend its beams' spots
  /// and tables stay in device memory from one compute() to the next.
  /// ConfigError for a plan prepared by another engine.
  DoseResult compute(const PreparedCt& ct, const PreparedPlan& plan) const;
  /// A prepared plan on a CT this call converts (prepare()).
  DoseResult compute(const CtImage& ct, const PreparedPlan& plan) const;
  /// Checks and converts a plan for this engine, whatever the CT: the
  /// InputErrors of compute() that do not depend on the CT (no beams, fewer
  /// than one fraction, a machine name that does not match, a range shifter
  /// without its distance, an energy outside the beam model, a spot with a
  /// negative or non-finite meterset or position) are thrown here.
  std::shared_ptr<const PreparedPlan> prepare_plan(const IonPlan& plan) const;
  /// Puts a prepared CT where compute() reads it — on a GPU backend, uploads
  /// its volumes into the engine's device cache — so that a later compute()
  /// on it starts at once: a one-shot process does this while its GPU still
  /// loads kernels. Nothing to do on the CPU backend.
  void preload(const PreparedCt& ct) const;
  /// Converts a CT for this engine (HU curve, output grid, scattering lengths).
  /// rsp_scale multiplies every relative stopping power (a range-uncertainty
  /// scenario; 1 = nominal), leaving the mass density as it is. Throws
  /// InputError for an inconsistent CT, ConfigError for a scale that is not
  /// finite and > 0.
  std::shared_ptr<const PreparedCt> prepare(const CtImage& ct, double rsp_scale = 1.0) const;

  const physics::BeamModel& machine() const { return machine_; }
  const physics::HuCurve& hu_curve() const { return hu_curve_; }
  const DoseEngineOptions& options() const { return options_; }

  /// The cached cumulative depth dose of a nominal energy (MeV).
  const physics::CumulativeDepthDose& depth_dose(double nominal_energy_mev) const;

  /// A layer's physics tables (dose_engine.cpp), fixed by its nominal energy
  /// and its beam's range-shifter WET: cached, so that a warm engine's
  /// compute() plans a beam without recomputing them.
  struct LayerPhysics;

 private:
  std::shared_ptr<const LayerPhysics> layer_physics(double nominal_energy_mev, double shifter_wet_mm) const;
  /// prepare_plan; `cached`: false for the transient plan of compute(ct,
  /// IonPlan), which the GPU executor stages without keeping (id 0).
  std::shared_ptr<const PreparedPlan> prepare_plan(const IonPlan& plan, bool cached) const;

  std::uint64_t id_ = 0;  ///< unique in the process (PreparedPlan::engine_id_)

  physics::BeamModel machine_;
  physics::HuCurve hu_curve_;
  DoseEngineOptions options_;
  std::unique_ptr<Superposer> superposer_;  ///< CPU backend
  std::unique_ptr<BeamExecutor> executor_;  ///< where the beams' arrays live (host or device)
  std::size_t stack_pixel_budget_ = 0;  ///< pixels of one superposition stack (max_stack_bytes)
  mutable std::mutex compute_mutex_;  ///< one compute() at a time (the executor's arrays)
  mutable std::mutex cache_mutex_;
  mutable std::map<double, physics::CumulativeDepthDose> depth_dose_cache_;
  /// By (nominal energy, shifter WET); bounded (cleared past kMaxLayerPhysics).
  mutable std::map<std::pair<double, double>, std::shared_ptr<const LayerPhysics>> layer_physics_cache_;
  /// Builds the layers' in-air σ tables while compute() collects the spots
  /// (last: its thread ends before the members it may read).
  mutable TaskThread setup_thread_;
};

/// The output grid: the CT grid, or the CT's extent (outer voxel faces) at
/// `spacing_mm` (> 0; ConfigError otherwise), on the CT's axes.
Grid3 output_grid(const Grid3& ct_grid, std::optional<double> spacing_mm);

/// Throws NumericalError naming the first offending voxel (index, position,
/// value) if the dose has a NaN, an Inf or a negative value; `what` names it.
void check_dose_values(const Volume<float>& dose_gy, const std::string& what);

/// 1 MeV/g in Gy: 1.602176634e-13 J / 1e-3 kg (CODATA 2018 elementary charge).
inline constexpr double kGyPerMevPerGram = 1.602176634e-10;

}  // namespace protondose::engine
