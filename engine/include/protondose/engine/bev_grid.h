#pragma once
/// \file bev_grid.h
/// The divergent beam's-eye-view (BEV) grid of one beam (da Silva, Ansorge &
/// Jena, PMB 60:4777, 2015, §2.2): planes normal to the central axis, one ray
/// per (col, row), slices along depth.
///
/// A ray is the line of constant (col, row). Its lateral position at depth d
/// (beam frame, mm from the isocentre, geometry.h) is
///   x = a·m_x(d),  y = b·m_y(d),  m_x(d) = 1 + d / SAD_x,  m_y(d) = 1 + d / SAD_y,
/// where (a, b) = (x0 + col·Δa, y0 + row·Δb) is where the ray crosses the
/// isocentre plane. Separate x/y virtual source–axis distances are kept; an
/// infinite SAD gives a parallel beam (m = 1). Slice k is centred at depth
/// d_k = depth0 + k·Δd and spans [d_k − Δd/2, d_k + Δd/2].
/// Arrays on the grid are [slice][row][col], col fastest (the superposition layout).

#include <cstddef>
#include <limits>

#include "protondose/core/grid.h"

namespace protondose::engine {

/// Parallel-beam limit of a virtual source–axis distance.
inline constexpr double kParallelSadMm = std::numeric_limits<double>::infinity();

struct BevGrid {
  double sad_x_mm = kParallelSadMm;  ///< virtual source–axis distance along IEC gantry X (mm, > 0 or ∞)
  double sad_y_mm = kParallelSadMm;  ///< along IEC gantry Y (mm, > 0 or ∞)
  double x0_mm = 0.0;     ///< isocentre-plane x of column 0 (mm)
  double y0_mm = 0.0;     ///< isocentre-plane y of row 0 (mm)
  double pitch_x_mm = 1.0;  ///< ray pitch along x at the isocentre plane (mm)
  double pitch_y_mm = 1.0;  ///< ray pitch along y at the isocentre plane (mm)
  double depth0_mm = 0.0;   ///< depth of the centre of slice 0 (mm from the isocentre)
  double depth_step_mm = 1.0;  ///< Δd between slices along the central axis (mm)
  int cols = 0;
  int rows = 0;
  int slices = 0;

  std::size_t rays() const { return static_cast<std::size_t>(cols) * static_cast<std::size_t>(rows); }
  std::size_t pixel_count() const { return rays() * static_cast<std::size_t>(slices); }
  std::size_t index(int slice, int row, int col) const {
    return (static_cast<std::size_t>(slice) * static_cast<std::size_t>(rows) + static_cast<std::size_t>(row)) *
               static_cast<std::size_t>(cols) + static_cast<std::size_t>(col);
  }
  double depth_mm(int slice) const { return depth0_mm + slice * depth_step_mm; }
  double magnification_x(double depth_mm) const { return 1.0 + depth_mm / sad_x_mm; }
  double magnification_y(double depth_mm) const { return 1.0 + depth_mm / sad_y_mm; }
  /// Isocentre-plane coordinates of a ray (mm).
  double iso_x_mm(double col) const { return x0_mm + col * pitch_x_mm; }
  double iso_y_mm(double row) const { return y0_mm + row * pitch_y_mm; }
  /// Beam-frame point (x_mm, y_mm, depth_mm) of a fractional (col, row, slice).
  Vec3 beam_point_mm(double col, double row, double slice) const;
  /// Fractional (col, row, slice) of a beam-frame point; inverse of beam_point_mm.
  Vec3 continuous_index(const Vec3& beam_point_mm) const;
  /// Path length along the ray per unit depth, sqrt(1 + (a/SAD_x)² + (b/SAD_y)²) (≥ 1).
  double path_per_depth(int col, int row) const;
  /// Throws InputError (naming `what`) for non-positive sizes, pitches or steps,
  /// or a SAD that is not > 0, or a slice that reaches the virtual source.
  void validate(const char* what) const;
};

/// What the grid must cover.
struct BevGridSpec {
  /// Bounding box of all spot positions at the isocentre plane (mm), before margins.
  double spot_min_x_mm = 0, spot_max_x_mm = 0, spot_min_y_mm = 0, spot_max_y_mm = 0;
  /// Lateral margin added on each side at the isocentre plane (mm): n_σ·σ of the
  /// widest spot plus the largest kernel radius, so the clipped KS loses nothing.
  double margin_x_mm = 0, margin_y_mm = 0;
  double pitch_x_mm = 1.0, pitch_y_mm = 1.0;  ///< ray pitch at the isocentre plane (mm, > 0)
  double sad_x_mm = kParallelSadMm, sad_y_mm = kParallelSadMm;
  double depth_begin_mm = 0, depth_end_mm = 0;  ///< depth range to cover (mm from the isocentre)
  double depth_step_mm = 1.0;  ///< slice thickness along the axis (mm, > 0)
};

/// Smallest grid on the spec's pitch that covers the spot box ± margin and the
/// depth range. Columns are centred symmetrically about the box. Throws
/// InputError for invalid pitch, step, SAD or an empty/inverted range.
BevGrid make_bev_grid(const BevGridSpec& spec);

}  // namespace protondose::engine
