#include "protondose/compare/resample.h"

#include <algorithm>
#include <cmath>

#include "protondose/core/parallel.h"
#include "volume_checks.h"

namespace protondose::compare {
namespace {

/// Lower neighbour and weight of the upper one along an axis of n voxels, for a
/// continuous index x already known to lie in [-0.5, n - 0.5]. Outside the box
/// of voxel centres the edge value is used (weight 0 on the missing side).
inline void axis_weights(double x, int n, int& lo, int& hi, double& w_hi) {
  if (n == 1 || x <= 0.0) {
    lo = hi = 0;
    w_hi = 0.0;
    return;
  }
  if (x >= n - 1) {
    lo = hi = n - 1;
    w_hi = 0.0;
    return;
  }
  lo = static_cast<int>(x);  // x > 0 here, so truncation is floor
  hi = lo + 1;
  w_hi = x - lo;
}

}  // namespace

bool inside_extent(const Grid3& grid, double i, double j, double k) {
  const double x[3] = {i, j, k};
  for (int a = 0; a < 3; ++a)
    if (!(x[a] >= -0.5 && x[a] <= grid.size[a] - 0.5)) return false;
  return true;
}

float sample_trilinear(const Volume<float>& src, double i, double j, double k) {
  const Grid3& g = src.grid;
  if (!inside_extent(g, i, j, k)) return 0.0f;
  int i0, i1, j0, j1, k0, k1;
  double fi, fj, fk;
  axis_weights(i, g.size[0], i0, i1, fi);
  axis_weights(j, g.size[1], j0, j1, fj);
  axis_weights(k, g.size[2], k0, k1, fk);
  const auto v = [&](int a, int b, int c) { return static_cast<double>(src.at(a, b, c)); };
  const double c00 = v(i0, j0, k0) + fi * (v(i1, j0, k0) - v(i0, j0, k0));
  const double c10 = v(i0, j1, k0) + fi * (v(i1, j1, k0) - v(i0, j1, k0));
  const double c01 = v(i0, j0, k1) + fi * (v(i1, j0, k1) - v(i0, j0, k1));
  const double c11 = v(i0, j1, k1) + fi * (v(i1, j1, k1) - v(i0, j1, k1));
  const double c0 = c00 + fj * (c10 - c00);
  const double c1 = c01 + fj * (c11 - c01);
  return static_cast<float>(c0 + fk * (c1 - c0));
}

Volume<float> resample_trilinear(const Volume<float>& src, const Grid3& dst,
                                 std::size_t* outside_count) {
  detail::check_volume(src, "resampling source volume");
  dst.validate("resampling target grid");
  Volume<float> out(dst, 0.0f);
  // Both grids are affine maps of their indices, so src's continuous index is
  // affine in dst's (i, j, k): base + i·di + j·dj + k·dk.
  const Vec3 base = src.grid.continuous_index(dst.position_mm(0, 0, 0));
  Vec3 step[3];
  for (int a = 0; a < 3; ++a) {
    const Vec3 p = src.grid.continuous_index(
        dst.position_mm(a == 0 ? 1 : 0, a == 1 ? 1 : 0, a == 2 ? 1 : 0));
    for (int c = 0; c < 3; ++c) step[a][c] = p[c] - base[c];
  }
  std::vector<std::size_t> outside_per_worker(static_cast<std::size_t>(default_thread_count()) + 1, 0);
  const std::size_t slices = static_cast<std::size_t>(dst.size[2]);
  const int workers = static_cast<int>(outside_per_worker.size()) - 1;
  parallel_for_chunks(slices, workers, [&](std::size_t k_begin, std::size_t k_end, int worker) {
    std::size_t outside = 0;
    for (std::size_t k = k_begin; k < k_end; ++k) {
      for (int j = 0; j < dst.size[1]; ++j) {
        for (int i = 0; i < dst.size[0]; ++i) {
          Vec3 x;
          for (int c = 0; c < 3; ++c)
            x[c] = base[c] + i * step[0][c] + j * step[1][c] + static_cast<double>(k) * step[2][c];
          if (!inside_extent(src.grid, x[0], x[1], x[2])) {
            ++outside;
            continue;
          }
          out.data[dst.index(i, j, static_cast<int>(k))] = sample_trilinear(src, x[0], x[1], x[2]);
        }
      }
    }
    outside_per_worker[static_cast<std::size_t>(worker)] += outside;
  });
  if (outside_count) {
    *outside_count = 0;
    for (std::size_t n : outside_per_worker) *outside_count += n;
  }
  return out;
}

}  // namespace protondose::compare
