#pragma once
/// \file ray_trace.h
/// CPU ray tracing of relative stopping power (RSP) and mass density through the
/// CT along the rays of a BEV grid (da Silva et al. 2015, §2.3): one sample per
/// ray and slice, trilinear in the CT, and the water-equivalent path length
/// (WEPL) accumulated slice by slice.
///
/// Each ray is sampled at the centre of every slice; the path length of a slice
/// along a divergent ray is Δs = Δd·sqrt(1 + (a/SAD_x)² + (b/SAD_y)²), and
/// WEPL_far(k) = WEPL_far(k−1) + RSP_k·Δs, starting from 0 at the near face of
/// slice 0. Points outside the CT box (beyond its outer voxel faces) are empty
/// (RSP 0, density 0): nothing outside the CT stops or scatters protons.

#include <vector>

#include "protondose/core/grid.h"
#include "protondose/engine/bev_grid.h"
#include "protondose/engine/geometry.h"

namespace protondose::engine {

/// Mass density (g/cm³) from which a sample counts as inside the patient:
/// above air (0.0012) and below the lightest lung (≈ 0.1–0.3).
inline constexpr double kPatientDensityThresholdGcm3 = 0.05;

/// Samples along every ray of a BEV grid. Arrays [slice][row][col], col fastest.
struct RayTrace {
  BevGrid grid;
  std::vector<float> rsp;              ///< relative stopping power at the slice centre
  std::vector<float> density_g_cm3;    ///< mass density at the slice centre (g/cm³)
  std::vector<float> wepl_far_mm;      ///< WEPL from the traced start to the slice's far face (mm)
  /// [row][col]: WEPL at the near face of slice 0 (mm): 0 for a fresh trace, the
  /// material in front after crop_slices.
  std::vector<float> wepl_start_mm;
  std::vector<float> step_mm;          ///< [row][col]: path length of one slice along the ray (mm)
  /// [row][col]: first slice inside the patient (density ≥ kPatientDensityThresholdGcm3), −1 if none.
  std::vector<int> entry_slice;

  /// WEPL at the near face of slice k of ray (row, col) (mm).
  float wepl_near_mm(int slice, int row, int col) const {
    return slice == 0 ? wepl_start_mm[static_cast<std::size_t>(row) * grid.cols + col]
                      : wepl_far_mm[grid.index(slice - 1, row, col)];
  }
};

/// Trilinear sample of `volume` at patient point `p_mm`; 0 outside the CT box
/// (beyond the outer voxel faces); between the outer voxel centres and faces the
/// edge value holds.
float sample_trilinear(const Volume<float>& volume, const Vec3& p_mm);

/// Depth range (mm from the isocentre, beam frame) spanned by the 8 corners of
/// the box bounded by the outer voxel faces of `grid`.
void box_depth_range(const Grid3& grid, const BeamFrame& frame, double& begin_mm, double& end_mm);

/// Traces every ray of `grid` through `rsp` and `density_g_cm3` (same CT grid).
/// Multi-threaded over rows (threads = 0: default_thread_count()). Throws
/// InputError if the two volumes have different grids or sizes that do not
/// match their grids.
RayTrace trace_rays(const BevGrid& grid, const BeamFrame& frame, const Volume<float>& rsp,
                    const Volume<float>& density_g_cm3, int threads = 0);

/// The slices [first_slice, first_slice + count) of a trace, with the grid
/// moved accordingly. WEPL keeps counting from the original grid start, so
/// material in front of the crop still slows the beam. Throws InputError for a
/// range outside the trace.
RayTrace crop_slices(const RayTrace& trace, int first_slice, int count);

}  // namespace protondose::engine
