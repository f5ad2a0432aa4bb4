#pragma once
/// \file beam_geometry.h
/// Host-side bridges from the engine's geometry types (Grid3, BevGrid,
/// BeamFrame) to the plain structs of beam_kernels.h. Private to the engine.

#include <algorithm>
#include <array>
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

/// Coarse pixels of the halo grid before and after the blocks of the fine
/// grid's rays, per axis (kernels::HaloBinning's pads).
struct HaloPads {
  int cols_before = 0, rows_before = 0, cols_after = 0, rows_after = 0;
};

/// The coarse halo grid of fine grid `fine`: f × f rays a pixel, centred on
/// its blocks of rays, with the pads around them; the fine grid's depths.
inline BevGrid halo_grid(const BevGrid& fine, int f, const HaloPads& pads) {
  BevGrid hg = fine;
  hg.pitch_x_mm = f * fine.pitch_x_mm;
  hg.pitch_y_mm = f * fine.pitch_y_mm;
  hg.cols = (fine.cols + f - 1) / f + pads.cols_before + pads.cols_after;
  hg.rows = (fine.rows + f - 1) / f + pads.rows_before + pads.rows_after;
  hg.x0_mm = fine.x0_mm + 0.5 * (f - 1) * fine.pitch_x_mm - pads.cols_before * hg.pitch_x_mm;
  hg.y0_mm = fine.y0_mm + 0.5 * (f - 1) * fine.pitch_y_mm - pads.rows_before * hg.pitch_y_mm;
  return hg;
}

/// The halo grid's pads: as far as the widest halo kernel reaches
/// (`reach`, coarse pixels a side), but no farther than the resampling reads
/// it — the isocentre-plane position of every output voxel centre stays
/// kHaloPadMarginPx coarse pixels inside the grid, so each of its trilinear
/// samples reads the same coarse pixels with the same weights as with the
/// whole reach (to the rounding of the fractional index, now counted from
/// another first pixel: an ulp of the GPU's float sample). The superposition
/// gives those pixels the same values: the input is zero in the pad, and the
/// separable passes sum each output's taps in the same order whatever the
/// grid's extent. The pad beyond is halo dose no voxel reads:
/// on the water cube (a 256 mm cube, 172 mm of rays) the fitted halo's
/// reach of ~150 mm a side made 87 % of the coarse pixels pad.
/// `grid`: the fine grid; f its rays per coarse pixel; `out`: the output
/// grid, whose voxel (i, j, k) is at beam_from_out_index (i, j, k).
inline HaloPads halo_pads(const BevGrid& grid, int f, int reach, const kernels::Affine3& beam_from_out_index,
                          const std::array<int, 3>& out) {
  constexpr int kHaloPadMarginPx = 2;
  const HaloPads whole{reach, reach, reach, reach};
  // The output's extent at the isocentre plane: x / m(d) over a box is
  // extreme at its corners (linear over linear, m > 0 throughout).
  double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  for (int corner = 0; corner < 8; ++corner) {
    double p[3];
    beam_from_out_index.apply(corner & 1 ? out[0] - 1 : 0, corner & 2 ? out[1] - 1 : 0, corner & 4 ? out[2] - 1 : 0, p);
    const double m[2] = {grid.magnification_x(p[2]), grid.magnification_y(p[2])};
    for (int a = 0; a < 2; ++a) {
      if (!(m[a] > 0.0) || !std::isfinite(p[a])) return whole;
      lo[a] = std::min(lo[a], p[a] / m[a]);
      hi[a] = std::max(hi[a], p[a] / m[a]);
    }
  }
  // Coarse pixel c of the blocks (c < 0: the pad before) is centred at
  // first + c·pitch, where the first block's rays are centred.
  const auto pads = [&](double first, double ray_pitch, int rays, double lo_mm, double hi_mm, int* before,
                        int* after) {
    const double pitch = f * ray_pitch, last = first + ((rays + f - 1) / f - 1) * pitch;
    const auto clamp_pad = [&](double px) {
      return static_cast<int>(std::clamp(std::ceil(px) + kHaloPadMarginPx, 0.0, static_cast<double>(reach)));
    };
    *before = clamp_pad((first - lo_mm) / pitch);
    *after = clamp_pad((hi_mm - last) / pitch);
  };
  HaloPads p;
  pads(grid.x0_mm + 0.5 * (f - 1) * grid.pitch_x_mm, grid.pitch_x_mm, grid.cols, lo[0], hi[0], &p.cols_before,
       &p.cols_after);
  pads(grid.y0_mm + 0.5 * (f - 1) * grid.pitch_y_mm, grid.pitch_y_mm, grid.rows, lo[1], hi[1], &p.rows_before,
       &p.rows_after);
  return p;
}

}  // namespace protondose::engine
