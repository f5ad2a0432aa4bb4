#pragma once
/// \file beam_geometry.h
/// Host-side bridges from the engine's geometry types (Grid3, BevGrid,
/// BeamFrame) to the plain structs of beam_kernels.h. Private to the engine.

#include <cmath>

#include "beam_kernels.h"
#include "protondose/core/grid.h"
#include "protondose/engine/bev_grid.h"
#include "protondose/engine/geometry.h"

namespace protondose::engine {

/// Affine map fitted exactly to an affine function by probing the origin and the unit vectors.
template <class F>
inline kernels::Affine3 affine_of(F f) {
  kernels::Affine3 m{};
  const Vec3 o = f(0.0, 0.0, 0.0);
  const Vec3 e[3] = {f(1.0, 0.0, 0.0), f(0.0, 1.0, 0.0), f(0.0, 0.0, 1.0)};
  for (int r = 0; r < 3; ++r) {
    m.b[r] = o[r];
    for (int c = 0; c < 3; ++c) m.a[r][c] = e[c][r] - o[r];
  }
  return m;
}

inline kernels::BevGeometry geometry_of(const BevGrid& g) {
  kernels::BevGeometry k{};
  k.inv_sad_x = std::isinf(g.sad_x_mm) ? 0.0 : 1.0 / g.sad_x_mm;
  k.inv_sad_y = std::isinf(g.sad_y_mm) ? 0.0 : 1.0 / g.sad_y_mm;
  k.x0_mm = g.x0_mm;
  k.y0_mm = g.y0_mm;
  k.pitch_x_mm = g.pitch_x_mm;
  k.pitch_y_mm = g.pitch_y_mm;
  k.depth0_mm = g.depth0_mm;
  k.depth_step_mm = g.depth_step_mm;
  k.cols = g.cols;
  k.rows = g.rows;
  k.slices = g.slices;
  k.inv_pitch_x_mm = 1.0 / g.pitch_x_mm;
  k.inv_pitch_y_mm = 1.0 / g.pitch_y_mm;
  k.inv_depth_step_mm = 1.0 / g.depth_step_mm;
  return k;
}

/// Continuous CT index of a beam-frame point.
inline kernels::Affine3 ct_index_from_beam(const Grid3& ct, const BeamFrame& frame) {
  return affine_of([&](double x, double y, double d) { return ct.continuous_index(frame.patient_from_beam({x, y, d})); });
}

/// Beam-frame point of an output voxel index.
inline kernels::Affine3 beam_from_voxel_index(const Grid3& out, const BeamFrame& frame) {
  return affine_of([&](double i, double j, double k) { return frame.beam_from_patient(out.position_mm(i, j, k)); });
}

}  // namespace protondose::engine
