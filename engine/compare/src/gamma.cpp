#include "protondose/compare/gamma.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "protondose/compare/resample.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "volume_checks.h"

namespace protondose::compare {

void GammaOptions::validate() const {
  auto fail = [](const std::string& what, double value, const std::string& range) {
    std::ostringstream m;
    m << "gamma option " << what << " = " << value << " is outside the accepted range " << range;
    throw ConfigError(m.str());
  };
  if (!(dose_criterion_percent > 0.0 && dose_criterion_percent <= 100.0))
    fail("dose criterion (%)", dose_criterion_percent, "(0, 100]");
  if (!(distance_mm > 0.0 && distance_mm <= 100.0)) fail("distance (mm)", distance_mm, "(0, 100]");
  if (!(normalisation_dose_gy >= 0.0 && std::isfinite(normalisation_dose_gy)))
    fail("normalisation dose (Gy)", normalisation_dose_gy, "0 (= reference maximum) or > 0");
  if (!(threshold_percent >= 0.0 && threshold_percent < 100.0))
    fail("threshold (%)", threshold_percent, "[0, 100)");
  if (local && !(threshold_percent > 0.0))
    fail("threshold (%) with local gamma", threshold_percent,
         "> 0 (local ΔD is a per cent of the reference dose, which must not be 0)");
  if (max_search_mm != 0.0 && !(max_search_mm >= distance_mm && max_search_mm <= 10.0 * distance_mm))
    fail("max search (mm)", max_search_mm, "0 (= 3 × distance) or [distance, 10 × distance]");
  if (!(resolution_fraction > 0.0 && resolution_fraction <= 0.5))
    fail("resolution fraction", resolution_fraction, "(0, 0.5]");
  if (!(tolerance >= 0.0 && tolerance <= 0.05)) fail("tolerance", tolerance, "[0, 0.05]");
  if (threads < 0) fail("threads", threads, ">= 0");
}

namespace {

/// A grid point of the evaluated dose relative to the reference voxel.
struct PointOffset {
  int di, dj, dk;
  double d2n;  ///< squared distance / Δd²
};

/// A voxel cell [c, c+1] (per axis, in index units) relative to the reference
/// voxel; on an axis with a single voxel the cell is flat (c = 0, no width).
struct CellOffset {
  int ci, cj, ck;
  double d2n;  ///< squared distance from the reference voxel to the nearest point of the cell / Δd²
};

/// A box of the evaluated dose's trilinear interpolant, in mm relative to the
/// reference voxel, with the interpolant's values at its 8 corners
/// (corner bit 0 = +i, bit 1 = +j, bit 2 = +k).
struct Box {
  double lo[3];
  double size[3];
  double v[8];
  double lb;  ///< lower bound of γ² over the box, when it was queued
};

/// Everything the per-voxel search needs, computed once.
struct SearchSetup {
  const float* eval = nullptr;
  int n[3] = {0, 0, 0};
  double h[3] = {1, 1, 1};  ///< voxel spacing (mm)
  bool flat[3] = {false, false, false};
  double inv_dta2 = 1.0;         ///< 1 / Δd² (1/mm²)
  double resolution_mm = 0.1;    ///< box edge below which no further subdivision
  double tolerance = 0.0;        ///< a region is skipped unless it may lower γ by more than this
  std::vector<PointOffset> points;
  std::vector<CellOffset> cells;
};

void build_offsets(SearchSetup& s, double max_search_mm) {
  const double r2 = max_search_mm * max_search_mm;
  int reach[3];
  for (int a = 0; a < 3; ++a)
    reach[a] = s.flat[a] ? 0 : static_cast<int>(std::floor(max_search_mm / s.h[a]));
  for (int dk = -reach[2]; dk <= reach[2]; ++dk)
    for (int dj = -reach[1]; dj <= reach[1]; ++dj)
      for (int di = -reach[0]; di <= reach[0]; ++di) {
        const double d2 = std::pow(di * s.h[0], 2) + std::pow(dj * s.h[1], 2) + std::pow(dk * s.h[2], 2);
        if (d2 <= r2 && (di || dj || dk)) s.points.push_back({di, dj, dk, d2 * s.inv_dta2});
      }
  // Nearest distance from 0 to the interval [c, c+1]·h along one axis.
  auto gap = [](int c, double h) {
    if (c >= 0 - 1 && c <= 0) return 0.0;
    return c > 0 ? c * h : (-(c + 1)) * h;
  };
  int lo[3], hi[3];
  for (int a = 0; a < 3; ++a) {
    lo[a] = s.flat[a] ? 0 : -reach[a] - 1;
    hi[a] = s.flat[a] ? 0 : reach[a];
  }
  for (int ck = lo[2]; ck <= hi[2]; ++ck)
    for (int cj = lo[1]; cj <= hi[1]; ++cj)
      for (int ci = lo[0]; ci <= hi[0]; ++ci) {
        const double d2 = std::pow(s.flat[0] ? 0.0 : gap(ci, s.h[0]), 2) +
                          std::pow(s.flat[1] ? 0.0 : gap(cj, s.h[1]), 2) +
                          std::pow(s.flat[2] ? 0.0 : gap(ck, s.h[2]), 2);
        if (d2 <= r2) s.cells.push_back({ci, cj, ck, d2 * s.inv_dta2});
      }
  auto by_distance = [](const auto& a, const auto& b) { return a.d2n < b.d2n; };
  std::stable_sort(s.points.begin(), s.points.end(), by_distance);
  std::stable_sort(s.cells.begin(), s.cells.end(), by_distance);
}

/// Lower bound of γ² over a box, the larger of two valid bounds:
///  - interval: the squared distance to the box's nearest point plus the
///    squared gap between D_ref and the interval of the corner values (a
///    trilinear function takes its extremes over a box at the corners);
///  - hull: in the normalised 4D space (x/Δd, D/ΔD), every point (x, D(x)) of
///    the box is a convex combination of its 8 corner points with the
///    trilinear weights (those weights reproduce x exactly), so it lies in
///    their convex hull; the hull's distance from (r, D_ref) is at least
///    min over corners of n·(P_c − O) for any unit vector n — here the
///    direction of the corners' mean. Unlike the interval bound it knows in
///    which direction the dose changes, which prunes boxes on the far side.
///
/// The hull bound is only computed when the interval bound does not already
/// reach `prune2` (the level at which the box is discarded).
inline double box_lower_bound(const Box& b, double d_ref, double inv_dd2, double inv_dta2, double prune2) {
  double d2 = 0.0;
  for (int a = 0; a < 3; ++a) {
    const double lo = b.lo[a], hi = b.lo[a] + b.size[a];
    if (lo > 0.0) d2 += lo * lo;
    else if (hi < 0.0) d2 += hi * hi;
  }
  double vmin = b.v[0], vmax = b.v[0];
  for (int c = 1; c < 8; ++c) {
    vmin = std::min(vmin, b.v[c]);
    vmax = std::max(vmax, b.v[c]);
  }
  const double g = d_ref < vmin ? vmin - d_ref : (d_ref > vmax ? d_ref - vmax : 0.0);
  const double interval = d2 * inv_dta2 + g * g * inv_dd2;
  if (interval >= prune2) return interval;

  const double sx = std::sqrt(inv_dta2), sd = std::sqrt(inv_dd2);
  double p[8][4], mean[4] = {0, 0, 0, 0};
  for (int c = 0; c < 8; ++c) {
    p[c][0] = (b.lo[0] + (c & 1 ? b.size[0] : 0.0)) * sx;
    p[c][1] = (b.lo[1] + (c & 2 ? b.size[1] : 0.0)) * sx;
    p[c][2] = (b.lo[2] + (c & 4 ? b.size[2] : 0.0)) * sx;
    p[c][3] = (b.v[c] - d_ref) * sd;
    for (int a = 0; a < 4; ++a) mean[a] += p[c][a];
  }
  const double norm = std::sqrt(mean[0] * mean[0] + mean[1] * mean[1] + mean[2] * mean[2] + mean[3] * mean[3]);
  if (!(norm > 0.0)) return interval;
  double lowest = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 8; ++c)
    lowest = std::min(lowest, (p[c][0] * mean[0] + p[c][1] * mean[1] + p[c][2] * mean[2] + p[c][3] * mean[3]) / norm);
  return lowest > 0.0 ? std::max(interval, lowest * lowest) : interval;
}

/// Records a new best γ² and the pruning level: regions whose lower bound
/// reaches (γ_best − tolerance)² cannot improve γ by more than the tolerance.
inline void update_best(double g2, double tolerance, double& best2, double& prune2) {
  best2 = g2;
  const double g = std::sqrt(g2) - tolerance;
  prune2 = g > 0.0 ? g * g : 0.0;
}

/// In a box at the final resolution, one more sample where the box's linear
/// model has its minimum: with the gradient g of the corner values and the
/// centre c (value D_c), minimise |c + u|²/Δd² + (D_c − D_ref + g·u)²/ΔD² —
/// (a I + b g gᵀ) u = −(a c + b (D_c − D_ref) g), a = 1/Δd², b = 1/ΔD²,
/// solved by Sherman–Morrison — clamp c + u into the box and evaluate the real
/// trilinear interpolant there, after two sweeps of exact coordinate descent on
/// the interpolant within the box. In steep gradients the lattice alone misses
/// the iso-dose surface by up to g × half a lattice step; this sample lands on
/// it. It is a real interpolant value, so γ can only get closer to the true
/// minimum.
void sample_linear_minimiser(const Box& b, double centre_value, double d_ref, double inv_dd2,
                             const SearchSetup& s, double& best2, double& prune2) {
  double g[3], c[3];
  for (int a = 0; a < 3; ++a) {
    c[a] = b.lo[a] + 0.5 * b.size[a];
    if (b.size[a] <= 0.0) {
      g[a] = 0.0;
      continue;
    }
    const int bit = 1 << a;
    double diff = 0.0;
    for (int corner = 0; corner < 8; ++corner)
      if (!(corner & bit)) diff += b.v[corner | bit] - b.v[corner];
    g[a] = 0.25 * diff / b.size[a];
  }
  const double av = s.inv_dta2, bv = inv_dd2, delta = centre_value - d_ref;
  const double gg = g[0] * g[0] + g[1] * g[1] + g[2] * g[2];
  double rhs[3];
  for (int a = 0; a < 3; ++a) rhs[a] = -(av * c[a] + bv * delta * g[a]);
  const double g_rhs = g[0] * rhs[0] + g[1] * rhs[1] + g[2] * rhs[2];
  const double k = bv / (av + bv * gg);
  double t[3];  // fractional position in the box, clamped to [0, 1]
  for (int a = 0; a < 3; ++a) {
    const double u = (rhs[a] - k * g[a] * g_rhs) / av;
    t[a] = b.size[a] > 0.0 ? std::clamp((c[a] + u - b.lo[a]) / b.size[a], 0.0, 1.0) : 0.0;
  }
  // The model point is a start: the clamped model minimiser is not the
  // minimiser within the box. Coordinate descent on the real interpolant
  // finishes the job — along one axis a trilinear function is linear, so each
  // step minimises a quadratic exactly (then clamps to the box).
  auto interpolate = [&b](const double f[3]) {
    const double c00 = b.v[0] + f[0] * (b.v[1] - b.v[0]);
    const double c10 = b.v[2] + f[0] * (b.v[3] - b.v[2]);
    const double c01 = b.v[4] + f[0] * (b.v[5] - b.v[4]);
    const double c11 = b.v[6] + f[0] * (b.v[7] - b.v[6]);
    const double c0 = c00 + f[1] * (c10 - c00), c1 = c01 + f[1] * (c11 - c01);
    return c0 + f[2] * (c1 - c0);
  };
  for (int sweep = 0; sweep < 2; ++sweep) {
    for (int a = 0; a < 3; ++a) {
      if (b.size[a] <= 0.0) continue;
      double f[3] = {t[0], t[1], t[2]};
      f[a] = 0.0;
      const double at0 = interpolate(f) - d_ref;
      f[a] = 1.0;
      const double slope = interpolate(f) - d_ref - at0;  // dose change over the box along a
      const double denom = av * b.size[a] * b.size[a] + bv * slope * slope;
      if (denom > 0.0) t[a] = std::clamp(-(av * b.size[a] * b.lo[a] + bv * slope * at0) / denom, 0.0, 1.0);
    }
  }
  double x[3];  // the sample's position relative to the reference voxel (mm)
  for (int a = 0; a < 3; ++a) x[a] = b.lo[a] + t[a] * b.size[a];
  const double dd = interpolate(t) - d_ref;
  const double g2 = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]) * av + dd * dd * bv;
  if (g2 < best2) update_best(g2, s.tolerance, best2, prune2);
}

/// Branch and bound over one cell of the trilinear interpolant: evaluate γ² on
/// the 3×3×3 lattice of a box (edge and face midpoints, centre; its corners were
/// evaluated before — as grid points or in the parent's lattice — or lie too far
/// away to matter), then split it into 8 children and keep those whose lower
/// bound is below the best γ² so far, until the lattice spacing is at most the
/// search resolution.
void refine_cell(const Box& cell, double d_ref, double inv_dd2, const SearchSetup& s,
                 double& best2, double& prune2, std::vector<Box>& stack) {
  stack.clear();
  stack.push_back(cell);
  while (!stack.empty()) {
    const Box b = stack.back();
    stack.pop_back();
    if (b.lb >= prune2) continue;  // the best γ improved since the box was queued
    // Values of the interpolant at t = 0, 1/2, 1 along each axis (exact: the
    // restriction of a trilinear function to a line is linear).
    double val[3][3][3];  // [k][j][i]
    for (int c = 0; c < 8; ++c) val[(c >> 2) & 1 ? 2 : 0][(c >> 1) & 1 ? 2 : 0][c & 1 ? 2 : 0] = b.v[c];
    for (int k = 0; k <= 2; k += 2)
      for (int j = 0; j <= 2; j += 2) val[k][j][1] = 0.5 * (val[k][j][0] + val[k][j][2]);
    for (int k = 0; k <= 2; k += 2)
      for (int i = 0; i < 3; ++i) val[k][1][i] = 0.5 * (val[k][0][i] + val[k][2][i]);
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 3; ++i) val[1][j][i] = 0.5 * (val[0][j][i] + val[2][j][i]);
    double half[3], x[3][3];
    for (int a = 0; a < 3; ++a) {
      half[a] = 0.5 * b.size[a];
      for (int t = 0; t < 3; ++t) {
        const double p = b.lo[a] + t * half[a];
        x[a][t] = p * p * s.inv_dta2;
      }
    }
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < 3; ++j) {
        const double d2jk = x[1][j] + x[2][k];
        if (d2jk >= prune2) continue;
        const bool corner_row = (j != 1) && (k != 1);
        for (int i = 0; i < 3; ++i) {
          if (corner_row && i != 1) continue;  // corners: evaluated before (see above)
          const double dd = val[k][j][i] - d_ref;
          const double g2 = x[0][i] + d2jk + dd * dd * inv_dd2;
          if (g2 < best2) update_best(g2, s.tolerance, best2, prune2);
        }
      }
    if (std::max({half[0], half[1], half[2]}) <= s.resolution_mm) {
      sample_linear_minimiser(b, val[1][1][1], d_ref, inv_dd2, s, best2, prune2);
      continue;
    }
    // Children below the bound go on the stack with the most promising (lowest
    // bound) on top: depth first towards a good γ, which then prunes the rest.
    Box children[8];
    double bounds[8];
    int order[8], kept = 0;
    for (int c = 0; c < 8; ++c) {
      const int oi = c & 1, oj = (c >> 1) & 1, ok = (c >> 2) & 1;
      Box& child = children[c];
      child.lo[0] = b.lo[0] + oi * half[0];
      child.lo[1] = b.lo[1] + oj * half[1];
      child.lo[2] = b.lo[2] + ok * half[2];
      for (int a = 0; a < 3; ++a) child.size[a] = half[a];
      for (int cc = 0; cc < 8; ++cc)
        child.v[cc] = val[ok + ((cc >> 2) & 1)][oj + ((cc >> 1) & 1)][oi + (cc & 1)];
      bounds[c] = box_lower_bound(child, d_ref, inv_dd2, s.inv_dta2, prune2);
      child.lb = bounds[c];
      if (bounds[c] < prune2) order[kept++] = c;
    }
    for (int n = 1; n < kept; ++n)  // insertion sort, descending bound
      for (int m = n; m > 0 && bounds[order[m - 1]] < bounds[order[m]]; --m) std::swap(order[m - 1], order[m]);
    for (int n = 0; n < kept; ++n) stack.push_back(children[order[n]]);
  }
}

/// γ² of one reference voxel (i, j, k) with dose d_ref: grid points first (a
/// quick upper bound), then the cells of the interpolant, both in order of
/// increasing distance, stopping once the distance term alone reaches the best
/// γ² found.
double voxel_gamma2(const SearchSetup& s, int i, int j, int k, double d_ref, double inv_dd2,
                    std::vector<Box>& stack) {
  const int nx = s.n[0], ny = s.n[1], nz = s.n[2];
  const auto at = [&](int a, int b, int c) {
    return static_cast<double>(s.eval[(static_cast<std::size_t>(c) * ny + b) * nx + a]);
  };
  double dd = at(i, j, k) - d_ref;
  double best2 = 0.0, prune2 = 0.0;
  update_best(dd * dd * inv_dd2, s.tolerance, best2, prune2);
  for (const PointOffset& o : s.points) {
    if (o.d2n >= prune2) break;
    const int a = i + o.di, b = j + o.dj, c = k + o.dk;
    if (a < 0 || a >= nx || b < 0 || b >= ny || c < 0 || c >= nz) continue;
    dd = at(a, b, c) - d_ref;
    const double g2 = o.d2n + dd * dd * inv_dd2;
    if (g2 < best2) update_best(g2, s.tolerance, best2, prune2);
  }
  // A first guess at the minimiser from a local linear model of the test dose,
  // D(r + u) ≈ D(r) + ∇D·u (central differences): the minimum of
  // |u|²/Δd² + (δ + ∇D·u)²/ΔD² lies at u* = −δ ∇D / (ΔD²/Δd² + |∇D|²). The
  // interpolant's real value there gives an upper bound that is usually close
  // to the final γ, so the branch and bound below mostly has to prove it.
  if (prune2 > 0.0 && i > 0 && j > 0 && k > 0 && i + 1 < nx && j + 1 < ny && k + 1 < nz) {
    const double grad[3] = {(at(i + 1, j, k) - at(i - 1, j, k)) / (2 * s.h[0]),
                            (at(i, j + 1, k) - at(i, j - 1, k)) / (2 * s.h[1]),
                            (at(i, j, k + 1) - at(i, j, k - 1)) / (2 * s.h[2])};
    const double delta = at(i, j, k) - d_ref;
    const double g2sum = grad[0] * grad[0] + grad[1] * grad[1] + grad[2] * grad[2];
    const double scale = -delta / (1.0 / (inv_dd2 / s.inv_dta2) + g2sum);
    double u[3], x[3];
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      u[a] = scale * grad[a];
      x[a] = (a == 0 ? i : (a == 1 ? j : k)) + u[a] / s.h[a];
      if (!(x[a] >= 0.0 && x[a] <= s.n[a] - 1)) inside = false;
    }
    if (inside && g2sum > 0.0) {
      int lo[3], hi[3];
      double f[3];
      for (int a = 0; a < 3; ++a) {
        lo[a] = std::min(static_cast<int>(x[a]), s.n[a] - 1);
        hi[a] = std::min(lo[a] + 1, s.n[a] - 1);
        f[a] = x[a] - lo[a];
      }
      const double c00 = at(lo[0], lo[1], lo[2]) + f[0] * (at(hi[0], lo[1], lo[2]) - at(lo[0], lo[1], lo[2]));
      const double c10 = at(lo[0], hi[1], lo[2]) + f[0] * (at(hi[0], hi[1], lo[2]) - at(lo[0], hi[1], lo[2]));
      const double c01 = at(lo[0], lo[1], hi[2]) + f[0] * (at(hi[0], lo[1], hi[2]) - at(lo[0], lo[1], hi[2]));
      const double c11 = at(lo[0], hi[1], hi[2]) + f[0] * (at(hi[0], hi[1], hi[2]) - at(lo[0], hi[1], hi[2]));
      const double c0 = c00 + f[1] * (c10 - c00), c1 = c01 + f[1] * (c11 - c01);
      const double dd_guess = c0 + f[2] * (c1 - c0) - d_ref;
      const double g2 = (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]) * s.inv_dta2 + dd_guess * dd_guess * inv_dd2;
      if (g2 < best2) update_best(g2, s.tolerance, best2, prune2);
    }
  }
  for (const CellOffset& o : s.cells) {
    if (o.d2n >= prune2) break;
    const int a0 = i + o.ci, b0 = j + o.cj, c0 = k + o.ck;
    const int a1 = s.flat[0] ? a0 : a0 + 1, b1 = s.flat[1] ? b0 : b0 + 1, c1 = s.flat[2] ? c0 : c0 + 1;
    if (a0 < 0 || a1 >= nx || b0 < 0 || b1 >= ny || c0 < 0 || c1 >= nz) continue;
    Box cell;
    cell.lo[0] = o.ci * s.h[0];
    cell.lo[1] = o.cj * s.h[1];
    cell.lo[2] = o.ck * s.h[2];
    cell.size[0] = s.flat[0] ? 0.0 : s.h[0];
    cell.size[1] = s.flat[1] ? 0.0 : s.h[1];
    cell.size[2] = s.flat[2] ? 0.0 : s.h[2];
    cell.v[0] = at(a0, b0, c0);
    cell.v[1] = at(a1, b0, c0);
    cell.v[2] = at(a0, b1, c0);
    cell.v[3] = at(a1, b1, c0);
    cell.v[4] = at(a0, b0, c1);
    cell.v[5] = at(a1, b0, c1);
    cell.v[6] = at(a0, b1, c1);
    cell.v[7] = at(a1, b1, c1);
    cell.lb = box_lower_bound(cell, d_ref, inv_dd2, s.inv_dta2, prune2);
    if (cell.lb >= prune2) continue;
    refine_cell(cell, d_ref, inv_dd2, s, best2, prune2, stack);
  }
  return best2;
}

/// Linear interpolation between order statistics (numpy's default percentile).
double percentile(std::vector<float>& values, double q_percent) {
  if (values.empty()) return 0.0;
  const double pos = q_percent / 100.0 * static_cast<double>(values.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(lo), values.end());
  const double v_lo = values[lo];
  if (hi == lo) return v_lo;
  const double v_hi = *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(lo) + 1, values.end());
  return v_lo + (pos - static_cast<double>(lo)) * (v_hi - v_lo);
}

}  // namespace

GammaResult gamma_3d(const Volume<float>& ref, const Volume<float>& eval, const GammaOptions& options) {
  options.validate();
  detail::check_volume(ref, "gamma reference dose");
  detail::check_volume(eval, "gamma evaluated dose");
  const double ref_max = detail::max_value(ref);
  if (!(ref_max > 0.0)) {
    std::ostringstream m;
    m << "gamma reference dose: maximum is " << ref_max
      << " Gy; a reference dose that is zero everywhere cannot be compared against";
    throw InputError(m.str());
  }

  GammaResult result;
  result.normalisation_dose_gy = options.normalisation_dose_gy > 0.0 ? options.normalisation_dose_gy : ref_max;
  result.threshold_dose_gy = options.threshold_percent / 100.0 * result.normalisation_dose_gy;
  result.max_search_mm = options.max_search_mm > 0.0 ? options.max_search_mm : 3.0 * options.distance_mm;
  result.resolution_mm = options.resolution_fraction * options.distance_mm;

  Volume<float> resampled;
  const Volume<float>* eval_on_ref = &eval;
  if (eval.grid != ref.grid) {
    resampled = resample_trilinear(eval, ref.grid, &result.reference_voxels_outside_evaluated);
    eval_on_ref = &resampled;
  }

  SearchSetup s;
  s.eval = eval_on_ref->data.data();
  for (int a = 0; a < 3; ++a) {
    s.n[a] = ref.grid.size[a];
    s.h[a] = ref.grid.spacing_mm[a];
    s.flat[a] = ref.grid.size[a] == 1;
  }
  s.inv_dta2 = 1.0 / (options.distance_mm * options.distance_mm);
  s.resolution_mm = result.resolution_mm;
  s.tolerance = options.tolerance;
  build_offsets(s, result.max_search_mm);

  const double criterion = options.dose_criterion_percent / 100.0;
  const double global_inv_dd2 = 1.0 / std::pow(criterion * result.normalisation_dose_gy, 2);
  const double limit2 = std::pow(result.max_search_mm / options.distance_mm, 2);
  const double threshold = result.threshold_dose_gy;

  Volume<float> gamma(ref.grid, kGammaNotEvaluated);
  const std::size_t rows = static_cast<std::size_t>(s.n[1]) * s.n[2];
  constexpr std::size_t kRowsPerTask = 4;
  std::atomic<std::size_t> next_row{0};
  const int workers = options.threads > 0 ? options.threads : default_thread_count();
  struct Tally {
    std::size_t evaluated = 0, passed = 0, limited = 0;
    double sum = 0.0, max = 0.0;
  };
  std::vector<Tally> tallies(static_cast<std::size_t>(workers));
  // One chunk per worker; the workers then pull rows from a shared counter, so
  // a dose concentrated in part of the grid still spreads over all of them.
  parallel_for_chunks(static_cast<std::size_t>(workers), workers,
                      [&](std::size_t, std::size_t, int worker) {
    // Counted locally and stored once: workers' tallies share cache lines.
    Tally t;
    std::vector<Box> stack;
    stack.reserve(64);
    for (;;) {
      const std::size_t first = next_row.fetch_add(kRowsPerTask);
      if (first >= rows) break;
      const std::size_t last = std::min(rows, first + kRowsPerTask);
      for (std::size_t row = first; row < last; ++row) {
        const int j = static_cast<int>(row % static_cast<std::size_t>(s.n[1]));
        const int k = static_cast<int>(row / static_cast<std::size_t>(s.n[1]));
        for (int i = 0; i < s.n[0]; ++i) {
          const std::size_t idx = ref.grid.index(i, j, k);
          const double d_ref = ref.data[idx];
          if (d_ref < threshold) continue;
          const double inv_dd2 = options.local ? 1.0 / std::pow(criterion * d_ref, 2) : global_inv_dd2;
          const double g2 = voxel_gamma2(s, i, j, k, d_ref, inv_dd2, stack);
          const double g = std::sqrt(g2);
          gamma.data[idx] = static_cast<float>(g);
          ++t.evaluated;
          if (g <= 1.0) ++t.passed;
          if (g2 > limit2) ++t.limited;
          t.sum += g;
          t.max = std::max(t.max, g);
        }
      }
    }
    tallies[static_cast<std::size_t>(worker)] = t;
  });

  double sum = 0.0;
  for (const Tally& t : tallies) {
    result.evaluated_voxels += t.evaluated;
    result.passed_voxels += t.passed;
    result.search_limited_voxels += t.limited;
    sum += t.sum;
    result.max_gamma = std::max(result.max_gamma, t.max);
  }
  if (result.evaluated_voxels == 0) {
    std::ostringstream m;
    m << "gamma: no reference voxel reaches the low-dose threshold of " << result.threshold_dose_gy
      << " Gy (" << options.threshold_percent << " % of " << result.normalisation_dose_gy
      << " Gy); the reference maximum is " << ref_max << " Gy";
    throw InputError(m.str());
  }
  const double n = static_cast<double>(result.evaluated_voxels);
  result.pass_rate_percent = 100.0 * static_cast<double>(result.passed_voxels) / n;
  result.mean_gamma = sum / n;
  std::vector<float> values;
  values.reserve(result.evaluated_voxels);
  for (float g : gamma.data)
    if (g != kGammaNotEvaluated) values.push_back(g);
  result.p95_gamma = percentile(values, 95.0);
  if (options.keep_gamma_volume) result.gamma = std::move(gamma);
  return result;
}

}  // namespace protondose::compare
