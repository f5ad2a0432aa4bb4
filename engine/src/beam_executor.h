#pragma once
/// \file beam_executor.h
/// Where the per-beam arrays live and who runs the per-ray arithmetic of
/// beam_kernels.h: host vectors and CPU threads (CpuBeamExecutor), or device
/// memory and CUDA kernels (GpuBeamExecutor), with no host round trip of the
/// stacks. dose_engine.cpp drives both through this interface: it plans the
/// beam (layers, grid, groups, tables) on the host and hands the executor
/// plain numbers and small tables. Private to the engine.

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "beam_kernels.h"
#include "protondose/core/error.h"
#include "protondose/core/grid.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/engine/spot_fluence.h"
#include "protondose/gpu/superposition.h"

namespace protondose::engine {

using PatientVolumes = PreparedCt;

/// One layer's host tables (what kernels::LayerTables points into).
struct HostLayerTables {
  /// The layer's index among the beam's layers (stage_beam_layers' order).
  int beam_layer = -1;
  const std::vector<SpotProtons>* spots = nullptr;  ///< validated; spread by the executor
  std::vector<double> fluence;  ///< [row][col] (CPU executor: filled from the spots)
  /// The depth-dose curve as kernels::curve_nodes lays it out (its pads
  /// included: kernels::curve_node_count gives its own nodes).
  const std::vector<kernels::CurveNode>* curve = nullptr;
  /// Uniform WEPL tables (the engine's cached layer physics; no halo: empty).
  const std::vector<double>* energy_mev = &kNoTable;
  const std::vector<double>* scattering_factor = &kNoTable;
  const std::vector<double>* halo_weight = &kNoTable;
  const std::vector<double>* halo_sigma_mm = &kNoTable;
  const std::vector<double>* air_sigma_x_mm = &kNoTable;  ///< [slice]
  const std::vector<double>* air_sigma_y_mm = &kNoTable;
  static inline const std::vector<double> kNoTable{};
  kernels::LayerScalars scalars{};  ///< the scalar fields; the executor adds the pointers
};

/// Result of tracing the full (uncropped) grid.
struct TraceSummary {
  int entry_slice = -1;           ///< first slice where any ray is in the patient, −1 if none
  int first_material_slice = -1;  ///< first slice with any material
  /// Per cut-off WEPL given to start_trace: the most slices from
  /// first_material_slice that any ray needs before its near face passes the
  /// cut-off (kernels::slices_before_cutoff); 0 without material.
  std::vector<int> slices_before_cutoff;
};

struct LayerImagesSummary {
  double energy_mev = 0;        ///< put into the stack
  int overshoot_px = 0;         ///< farthest a kernel reaches past the grid edge (≤ 0: none)
  double max_halo_variance_mm2 = 0;
};

/// Check of one beam's dose: the first bad voxel (linear index, −1 if none)
/// and the deposited energy Σ dose·mass-density (Gy·g/cm³ summed over voxels).
struct BeamDoseCheck {
  long long first_bad_voxel = -1;
  float bad_value = 0;
  double dose_times_density = 0;
};

/// The arrays an executor binds into kernels::LayerStackArgs (host or device).
struct StackArrays {
  const float *wepl_far_mm, *density_g_cm3, *rho_over_x, *step_mm;
  float *image, *sigma_x_px, *sigma_y_px;
  float *halo_image, *halo_variance_mm2;  ///< null without the halo
};

inline kernels::LayerStackArgs bind_stack(kernels::LayerStackArgs s, const StackArrays& a) {
  s.wepl_far_mm = a.wepl_far_mm;
  s.density_g_cm3 = a.density_g_cm3;
  s.rho_over_x = a.rho_over_x;
  s.step_mm = a.step_mm;
  s.image = a.image;
  s.sigma_x_px = a.sigma_x_px;
  s.sigma_y_px = a.sigma_y_px;
  s.halo_image = a.halo_image;
  s.halo_variance_mm2 = a.halo_variance_mm2;
  return s;
}

/// The first beam layer of a group of layer tables whose layers an executor
/// staged (stage_beam_layers: `staged_layers` of them, beam_layer 0 …
/// staged_layers − 1): the group's beam_layer must run consecutively inside
/// the staging. Staged as a whole beam, the layers themselves are a group
/// from 0. InternalError otherwise (a driver's mistake, not bad input).
inline std::size_t staged_group_first_layer(const std::vector<HostLayerTables>& group, std::size_t staged_layers) {
  if (group.empty()) return 0;
  const long long first = group.front().beam_layer;
  for (std::size_t l = 0; l < group.size(); ++l) {
    const long long expected = first + static_cast<long long>(l);
    if (first < 0 || group[l].beam_layer != expected || expected >= static_cast<long long>(staged_layers))
      throw InternalError("layer group: table " + std::to_string(l) + " names beam layer " +
                          std::to_string(group[l].beam_layer) + "; expected " + std::to_string(expected) +
                          " of the " + std::to_string(staged_layers) + " staged layers (0 to " +
                          std::to_string(static_cast<long long>(staged_layers) - 1) + ")");
  }
  return static_cast<std::size_t>(first);
}

/// Which beam of which prepared plan stage_beam_layers is given: the GPU
/// executor keeps the last beams' spots and tables in device memory under it.
/// plan_id 0: a plan prepared for one computation, staged without keeping.
struct StagedBeamKey {
  std::uint64_t plan_id = 0;  ///< PreparedPlan::id()
  std::size_t beam = 0;       ///< the beam's index in the plan
  bool operator==(const StagedBeamKey& o) const { return plan_id == o.plan_id && beam == o.beam; }
};

/// The GPU's layer kernel sums the halo over groups of 1, 2, 4 or 8
/// neighbouring rays of a warp (LayerStackArgs::halo_column_bin, chosen by
/// kernels::halo_column_bin). InternalError otherwise (a driver's mistake).
inline void check_halo_column_bin(int column_bin) {
  if (column_bin == 1 || column_bin == 2 || column_bin == 4 || column_bin == 8) return;
  throw InternalError("layer images: halo column bin " + std::to_string(column_bin) + "; expected 1, 2, 4 or 8");
}

/// The halo binning reads the column sums of the last layer images: its
/// column bin must be theirs and its factor a multiple of it
/// (kernels::halo_factor). InternalError otherwise.
inline void check_halo_binning(const kernels::HaloBinning& h, int layer_images_column_bin) {
  if (h.column_bin == layer_images_column_bin && h.column_bin >= 1 && h.factor % h.column_bin == 0) return;
  throw InternalError("halo binning: column bin " + std::to_string(h.column_bin) + " with factor " +
                      std::to_string(h.factor) + "; the layer images summed over " +
                      std::to_string(layer_images_column_bin) + " columns, and the factor must be a multiple of it");
}

/// What trace_summary returns, against what start_trace was given: a cut-off
/// count per layer, each at most the slices from the first material slice to
/// the full grid's end (the crop takes them from there). Call it once the
/// trace has met the patient (entry_slice ≥ 0). InternalError otherwise.
inline void check_trace_summary(const TraceSummary& s, std::size_t layers, int full_slices) {
  std::ostringstream m;
  if (s.first_material_slice < 0 || s.first_material_slice >= full_slices) {
    m << "trace summary: first material slice " << s.first_material_slice << " outside the full grid's " << full_slices
      << " slices";
  } else if (s.slices_before_cutoff.size() != layers) {
    m << "trace summary: " << s.slices_before_cutoff.size() << " cut-off counts for " << layers << " layers";
  } else {
    const int room = full_slices - s.first_material_slice;
    for (std::size_t l = 0; l < layers && m.tellp() == 0; ++l) {
      const int n = s.slices_before_cutoff[l];
      if (n < 0 || n > room)
        m << "trace summary: layer " << l << " needs " << n << " slices; 0 to " << room << " lie past slice "
          << s.first_material_slice;
    }
  }
  if (m.tellp() != 0) throw InternalError(m.str());
}

/// The stack a superposition is given (superpose_stack, start_halo) is the one
/// whose depth groups the last layer_images staged: `who` names the caller.
/// InternalError otherwise.
inline void check_stack_staged(const char* who, std::size_t stack_slices, int bev_slices,
                               std::size_t staged_stack_slices, int staged_bev_slices) {
  if (stack_slices == staged_stack_slices && bev_slices == staged_bev_slices) return;
  throw InternalError(std::string(who) + ": not the stack of the last layer_images (" + std::to_string(stack_slices) +
                      " stack slices over " + std::to_string(bev_slices) + " depth slices; staged: " +
                      std::to_string(staged_stack_slices) + " over " + std::to_string(staged_bev_slices) + ")");
}

/// The stack slices that make up each BEV depth slice, as the beam dose adds
/// them (SuperpositionInput::groups on the GPU): group d lists, layer after
/// layer in stack order, slice stack_offset + d of each layer with more than
/// d slices. member_begin has bev_slices + 1 offsets into member_slices.
struct DepthGroups {
  std::vector<int> member_begin, member_slices;
};

/// Both executors add each depth's slices in this order (the CPU's loops,
/// the GPU's superposer), so that their doses agree to rounding.
inline DepthGroups depth_groups(const std::vector<HostLayerTables>& layers, int bev_slices) {
  DepthGroups g;
  g.member_begin.reserve(static_cast<std::size_t>(bev_slices) + 1);
  g.member_begin.push_back(0);
  for (int d = 0; d < bev_slices; ++d) {
    for (const HostLayerTables& L : layers) {
      if (d >= L.scalars.slices) continue;
      const std::size_t slice = L.scalars.stack_offset + static_cast<std::size_t>(d);
      if (slice > static_cast<std::size_t>(INT_MAX))
        throw InternalError("depth groups: stack slice " + std::to_string(slice) + " past the int range");
      g.member_slices.push_back(static_cast<int>(slice));
    }
    g.member_begin.push_back(static_cast<int>(g.member_slices.size()));
  }
  return g;
}

/// Each stack slice's depth slice (its slice index within its layer).
inline std::vector<int> stack_depth_slices(const std::vector<HostLayerTables>& layers, std::size_t stack_slices) {
  std::vector<int> depth(stack_slices, 0);
  for (const HostLayerTables& L : layers)
    for (int k = 0; k < L.scalars.slices; ++k) depth[L.scalars.stack_offset + static_cast<std::size_t>(k)] = k;
  return depth;
}

struct PlanDoseSummary {
  double max_dose = 0;
  long long first_bad_voxel = -1;
  float bad_value = 0;
};

class BeamExecutor {
 public:
  virtual ~BeamExecutor() = default;
  virtual bool on_device() const = 0;

  /// The CT for the next beams (cached by volumes.id).
  virtual void set_patient(const PatientVolumes& volumes) = 0;
  /// Starts a beam on the output grid (its dose is complete after finish_beam).
  virtual void begin_beam() = 0;

  /// Starts tracing every ray of `full` (kept for the layer images) and
  /// finding, per cut-off WEPL, the slices the rays need (TraceSummary); the
  /// GPU executor returns at once, so that the host can stage the beam's
  /// layers and tabulate their in-air σ meanwhile. trace_summary() ends it. (The cut-offs ride with the
  /// trace: found after it, from the first material slice the host had read
  /// back, they took a second round trip with the GPU idle, ~40 µs.)
  virtual void start_trace(const kernels::BevGeometry& full, const kernels::Affine3& ct_index_from_beam,
                           const std::vector<double>& cutoff_wepl_mm) = 0;
  /// After start_trace, while the trace runs: every layer of the beam
  /// (layers[i].beam_layer == i) with what does not depend on the grid — its
  /// spots (isocentre plane, mm), its depth-dose curve and its WEPL tables —
  /// as the beam `key` of a prepared plan. The GPU executor keeps the last
  /// beams it staged in device memory: a beam it holds (same key, plan_id ≠
  /// 0) costs nothing; another it packs on two threads of its own (~0.2 ms
  /// for the water cube's 21,780 spots, H200 host, which the GPU spends on
  /// the trace) and uploads in the first layer_images; the tables must live
  /// until that layer_images, or wait_staged_layers, returns. The CPU
  /// executor reads the host tables in layer_images and does nothing here.
  /// The tables handed to layer_images name their layer by beam_layer.
  virtual void stage_beam_layers(const std::vector<HostLayerTables>& layers, StagedBeamKey key) {
    (void)layers;
    (void)key;
  }
  /// Returns once nothing reads the tables stage_beam_layers was given any
  /// more (the GPU executor's packing threads are done or released), errors
  /// of the packing dropped: the engine calls it before a computation that
  /// fails between stage_beam_layers and layer_images (which waits for the
  /// packing itself) unwinds past the tables.
  virtual void wait_staged_layers() noexcept {}
  /// After stage_beam_layers, before trace_summary: the spread σ of every
  /// layer of the beam ([layer][x, y], isocentre plane, mm; the σ that
  /// layer_images' tables will carry) and the spreading's cut-off, on the
  /// lateral layout of `full` (the crop keeps it). The GPU executor queues
  /// the spots' spreading behind the trace here, so that it runs while the
  /// host crops; layer_images then checks that its tables and grid are the
  /// ones spread. The CPU executor spreads in layer_images and does nothing
  /// here.
  virtual void spread_beam_fluence(const kernels::BevGeometry& full, const std::vector<double>& spread_sigma_iso_mm,
                                   double cutoff_sigmas) {
    (void)full;
    (void)spread_sigma_iso_mm;
    (void)cutoff_sigmas;
  }
  /// Where the trace started last meets the patient, and its cut-offs' slices
  /// (waits for it, not for what was queued after it).
  virtual TraceSummary trace_summary() = 0;
  /// Waits for the work queued so far (stage timings).
  virtual void synchronize() {}

  /// Zeroes the BEV dose of the cropped grid (pixel count `bev_pixels`).
  virtual void begin_bev(std::size_t bev_pixels) = 0;

  /// Spreads each layer's spots onto the rays (σ from its scalars, isocentre
  /// plane; unless spread_beam_fluence did) and fills the stack of layers [0, layers.size()) (stack_slices
  /// slices) on the cropped grid.
  virtual LayerImagesSummary layer_images(const kernels::LayerStackArgs& shared, std::size_t stack_slices,
                                          std::vector<HostLayerTables>& layers, bool halo) = 0;

  /// Superposes the stack and adds each layer's slices into the BEV dose
  /// (layer i's slice k → BEV slice k). Returns how many of the stack's
  /// slices ran as separable passes because their σ is uniform (GPU scatter;
  /// 0 on the CPU oracle, which scatters every slice).
  virtual std::size_t superpose_stack(const kernels::BevGeometry& grid, std::size_t stack_slices,
                                      const std::vector<HostLayerTables>& layers) = 0;

  /// The nuclear halo of the stack: binning onto the coarse grid (a coarse
  /// slice per stack slice: kernels::halo_bin_pixel on the CPU, from the
  /// layer kernel's column sums on the GPU), superposition, and resampling
  /// into the beam dose (the GPU executor leaves the last one's resampling to
  /// finish_beam's pass). It reads only the layer images' halo shares and adds
  /// into the beam dose, which superpose_stack leaves alone, so an executor
  /// may run it alongside superpose_stack (the GPU executor does) or at once,
  /// on the calling thread (the CPU executor). wait_halo() must follow before
  /// finish_beam().
  virtual void start_halo(const kernels::BevGeometry& fine, const kernels::BevGeometry& coarse,
                          const kernels::HaloBinning& binning, std::size_t stack_slices,
                          const std::vector<HostLayerTables>& layers, const kernels::Affine3& beam_from_out_index) = 0;
  /// Ends the halo of start_halo: its own seconds when it ran alongside,
  /// nothing when start_halo ran it to the end. Rethrows the halo's error.
  virtual std::optional<double> wait_halo() { return std::nullopt; }

  /// Resamples the BEV dose into the beam dose (after the halo's), checks the
  /// beam dose, then adds it to the plan dose; the density of the check's
  /// energy sum is the output grid's RSP (dose to water) or mass density. One
  /// call, so that an executor may do it in one pass over the dose grid (the
  /// GPU executor does: it also resamples the halo's last coarse dose there).
  /// `last_beam_plan_scale`: given for the plan's last beam, the scale that
  /// finish_plan will get; an executor may scale and check the plan dose in
  /// the same pass (the GPU executor does) and have finish_plan report it.
  virtual BeamDoseCheck finish_beam(const kernels::BevGeometry& grid, const kernels::Affine3& beam_from_out_index,
                                    bool dose_to_water, std::optional<double> last_beam_plan_scale) = 0;

  /// After the last beam: scales the plan dose by `scale` (RBE or 1) and checks it.
  virtual PlanDoseSummary finish_plan(double scale) = 0;

  /// The beam dose (host copy), for per-beam output.
  virtual Volume<float> beam_dose() = 0;
  /// The plan dose (host copy), sum over finished beams.
  virtual Volume<float> plan_dose() = 0;
  /// Starts a plan dose on the output grid `og`: zero until finish_beam adds
  /// the beams (an executor may write the first beam instead of clearing).
  virtual void begin_plan(const Grid3& og) = 0;
};

/// The arithmetic of the CPU executor's layer images (kernels::layer_ray<Real>).
enum class LayerArithmetic {
  kDouble,  ///< the double-precision oracle
  kFloat,   ///< the GPU executor's single precision: for tests that measure it without a GPU
};

/// CPU executor: host arrays, `threads` worker threads, the given superposer.
std::unique_ptr<BeamExecutor> make_cpu_beam_executor(Superposer& superposer, int threads, LayerArithmetic arithmetic);

/// GPU executor on CUDA device `device` with superposition `method`;
/// UnavailableError without CUDA or without that device.
std::unique_ptr<BeamExecutor> make_gpu_beam_executor(SuperpositionMethod method, const SuperpositionOptions& options);

}  // namespace protondose::engine
