#pragma once
/// \file beam_kernels.h
/// The per-ray and per-voxel arithmetic of one beam — ray tracing, the layer
/// images and σ-maps, the coarse halo grid, resampling onto the dose grid —
/// written once as host/device functions over plain structs and raw pointers,
/// so the CPU backend (engine/src/beam_executor_cpu.cpp) and the CUDA kernels
/// (engine/src/cuda/beam_executor_gpu.cu) run the same operations in the same
/// order. Private to the engine; no std:: containers, no exceptions.
///
/// Method: da Silva, Ansorge & Jena, Phys Med Biol 60:4777 (2015), §2.2–2.5;
/// the physics behind each table is cited where the tables are built
/// (engine/src/beam_tables.cpp).

#include <cmath>
#include <cstddef>
#include <vector>

#include "protondose/engine/dose_engine.h"     // kGyPerMevPerGram
#include "protondose/engine/ray_trace.h"       // kPatientDensityThresholdGcm3
#include "protondose/gpu/approx_math.h"      // rcp_approx, rsqrt_approx
#include "protondose/gpu/gaussian_kernel.h"  // PROTONDOSE_HOST_DEVICE, gaussian_radius_px
#include "protondose/gpu/superposition.h"    // SliceBox

namespace protondose::engine::kernels {

#define PD_HD PROTONDOSE_HOST_DEVICE

/// y = A·x + b.
struct Affine3 {
  double a[3][3];
  double b[3];
  PD_HD void apply(double x0, double x1, double x2, double y[3]) const {
    for (int r = 0; r < 3; ++r) y[r] = a[r][0] * x0 + a[r][1] * x1 + a[r][2] * x2 + b[r];
  }
};

/// The divergent BEV grid (bev_grid.h) as plain numbers. 1/SAD is 0 for a parallel beam.
struct BevGeometry {
  double inv_sad_x, inv_sad_y;
  double x0_mm, y0_mm, pitch_x_mm, pitch_y_mm;
  double depth0_mm, depth_step_mm;
  int cols, rows, slices;
  /// 1/pitch and 1/depth step: the resampling multiplies by them (a double
  /// division is a ~20-instruction sequence on the GPU, five of them per voxel
  /// made the resampling instruction-bound).
  double inv_pitch_x_mm, inv_pitch_y_mm, inv_depth_step_mm;

  PD_HD double depth_mm(int slice) const { return depth0_mm + slice * depth_step_mm; }
  PD_HD double magnification_x(double d) const { return 1.0 + d * inv_sad_x; }
  PD_HD double magnification_y(double d) const { return 1.0 + d * inv_sad_y; }
  PD_HD std::size_t plane() const { return static_cast<std::size_t>(cols) * static_cast<std::size_t>(rows); }
  PD_HD double path_per_depth(int col, int row) const {
    const double tx = (x0_mm + col * pitch_x_mm) * inv_sad_x;
    const double ty = (y0_mm + row * pitch_y_mm) * inv_sad_y;
    return sqrt(1.0 + tx * tx + ty * ty);
  }
};

/// fmin, fmax and floor of a kernel's Real type: the float overloads keep a
/// float instantiation in single precision on the host as on the device.
PD_HD inline double real_fmin(double a, double b) { return fmin(a, b); }
PD_HD inline float real_fmin(float a, float b) { return fminf(a, b); }
PD_HD inline double real_fmax(double a, double b) { return fmax(a, b); }
PD_HD inline float real_fmax(float a, float b) { return fmaxf(a, b); }
PD_HD inline double real_floor(double a) { return floor(a); }
PD_HD inline float real_floor(float a) { return floorf(a); }

/// Linear index, lower node and weight along one axis of n samples; false
/// outside the half-pixel border (sample_trilinear / sample_bev semantics).
/// Real: double (the CT trace, the CPU's resampling) or float (the GPU's
/// resampling: sample_bev_index<float>).
template <class Real>
PD_HD inline bool axis_lerp(Real c, int n, int& i0, int& i1, Real& f) {
  if (!(c >= Real(-0.5)) || !(c <= n - Real(0.5))) return false;
  const Real x = real_fmin(real_fmax(c, Real(0)), static_cast<Real>(n - 1));
  int i = static_cast<int>(real_floor(x));
  if (i >= n - 1) i = n - 2 > 0 ? n - 2 : 0;
  i0 = i;
  i1 = i + 1 < n - 1 ? i + 1 : n - 1;
  f = n == 1 ? Real(0) : x - static_cast<Real>(i);
  return true;
}

/// The eight voxels and weights of a trilinear sample of a [k][j][i] volume
/// (i fastest) of size n at continuous index (ci, cj, ck): found once, then
/// blended from any volume of that grid (the trace samples stopping power and
/// density at every point, and on the GPU its kernel is bound by its
/// instruction issue; ncu, H100). The voxels are one corner and the steps
/// to its neighbours along each axis (one voxel, or none on an axis of one
/// voxel): eight 64-bit offsets, their sums and their zeroing took ~90 of
/// the GPU trace's ~440 instructions per sample (SASS, water cube, H100).
struct TrilinearPoint {
  bool inside = false;  ///< false outside the outer voxel faces: every sample 0
  std::size_t corner = 0;   ///< offset of voxel (i0, j0, k0)
  std::size_t step_j = 0, step_k = 0;  ///< offset of j1 from j0, of k1 from k0
  int step_i = 0;           ///< offset of i1 from i0
  double fi = 0, fj = 0, fk = 0;

  PD_HD TrilinearPoint(const int n[3], double ci, double cj, double ck) {
    int i0, i1, j0, j1, k0, k1;
    if (!axis_lerp(ci, n[0], i0, i1, fi) || !axis_lerp(cj, n[1], j0, j1, fj) || !axis_lerp(ck, n[2], k0, k1, fk))
      return;
    inside = true;
    const std::size_t nx = static_cast<std::size_t>(n[0]), nxy = nx * static_cast<std::size_t>(n[1]);
    corner = static_cast<std::size_t>(k0) * nxy + static_cast<std::size_t>(j0) * nx + static_cast<std::size_t>(i0);
    step_i = i1 - i0;
    step_j = static_cast<std::size_t>(j1 - j0) * nx;
    step_k = static_cast<std::size_t>(k1 - k0) * nxy;
  }

  /// The sample of volume v (0 outside).
  PD_HD float of(const float* v) const {
    if (!inside) return 0.0f;
    const float* k0j0 = v + corner;
    const float* k0j1 = k0j0 + step_j;
    const float* k1j0 = k0j0 + step_k;
    const float* k1j1 = k0j1 + step_k;
    const auto at = [](const float* p) { return static_cast<double>(*p); };
    const double c00 = at(k0j0) * (1 - fi) + at(k0j0 + step_i) * fi;
    const double c10 = at(k0j1) * (1 - fi) + at(k0j1 + step_i) * fi;
    const double c01 = at(k1j0) * (1 - fi) + at(k1j0 + step_i) * fi;
    const double c11 = at(k1j1) * (1 - fi) + at(k1j1 + step_i) * fi;
    const double c0 = c00 * (1 - fj) + c10 * fj;
    const double c1 = c01 * (1 - fj) + c11 * fj;
    return static_cast<float>(c0 * (1 - fk) + c1 * fk);
  }
};

/// Trilinear sample of a [k][j][i] volume (i fastest) of size n at continuous
/// index (ci, cj, ck); 0 outside the outer voxel faces.
PD_HD inline float sample_volume(const float* v, const int n[3], double ci, double cj, double ck) {
  return TrilinearPoint(n, ci, cj, ck).of(v);
}

// ---------------------------------------------------------------------------
// Ray tracing

/// Mass density (g/cm³) below which a sample scatters nothing.
constexpr double kMinScatteringDensity = 1e-6;

/// Where x = u/inv_step falls in a uniform table of n ≥ 2 nodes: segment i
/// and fraction f, clamped at both ends so that uniform_table_at gives t[0]
/// below the first node (and for NaN) and t[n − 1] past the last, exactly
/// (weights 1 and 0). One point serves every table on the same nodes.
template <class Real>
struct UniformTablePoint {
  int i;
  Real f;
};
template <class Real>
PD_HD inline UniformTablePoint<Real> uniform_table_point(int n, Real inv_step, Real x) {
  const Real u = x * inv_step;
  if (!(u > 0)) return {0, Real(0)};
  if (!(u < static_cast<Real>(n - 1))) return {n - 2, Real(1)};
  const int i = static_cast<int>(u);
  return {i, u - i};
}
template <class Real>
PD_HD inline Real uniform_table_at(const Real* t, UniformTablePoint<Real> p) {
  return t[p.i] * (1 - p.f) + t[p.i + 1] * p.f;
}

/// Uniform table t[i] at x = i/inv_step: linear interpolation, clamped at both
/// ends, in the table's type.
template <class Real>
PD_HD inline Real uniform_table(const Real* t, int n, Real inv_step, Real x) {
  if (n < 2) return t[0];
  return uniform_table_at(t, uniform_table_point(n, inv_step, x));
}

/// Square root and quotient of layer_ray<Real>'s per-slice results: IEEE in
/// double (the CPU oracle) and on the host; in float on the GPU the hardware
/// approximations (MUFU, within 2 ulp, against a ~10-instruction IEEE sequence
/// each), in a loop bound by its instruction issue. x ≥ 0; b a normal float.
/// Flushing subnormals (.ftz): rsqrtf and __fdividef guard a subnormal
/// operand with a compare, two scalings and a select each, 15 of the loop's
/// ~450 instructions per step (SASS, water cube, H100); the results of
/// normal operands are the same bits, and a width or dose below 2⁻¹²⁶ is 0.
PD_HD inline double result_sqrt(double x) { return sqrt(x); }
PD_HD inline float result_sqrt(float x) {
#ifdef __CUDA_ARCH__
  return x > 0.0f ? x * rsqrt_approx(x) : 0.0f;
#else
  return sqrtf(x);
#endif
}
PD_HD inline double result_divide(double a, double b) { return a / b; }
PD_HD inline float result_divide(float a, float b) {
#ifdef __CUDA_ARCH__
  return a * rcp_approx(b);
#else
  return a / b;
#endif
}

struct TraceInput {
  BevGeometry grid;
  Affine3 ct_index_from_beam;  ///< continuous CT index of a beam-frame point
  const float* rsp;            ///< CT grid, [k][j][i]
  const float* density_g_cm3;
  int ct_size[3];
  /// 1/X(ρ) (cm²/g) of the scattering model's length X, tabulated on ρ = i·Δρ
  /// (physics::radiation_length_g_cm2 or scattering_length_g_cm2).
  const double* inverse_length_table;
  int inverse_length_nodes;
  double inv_density_step;
};

/// Arrays [slice][row][col] of the full (uncropped) trace.
struct TraceOutput {
  float* rsp;
  float* density_g_cm3;
  float* wepl_far_mm;
  float* rho_over_x;  ///< ρ/X (cm⁻¹ per (g/cm³)·…): the material factor of the scattering power
  float* step_mm;  ///< [row][col]
};

/// Samples ray (col, row) at the centre of slice k: stopping power, density
/// and the material factor ρ/X.
PD_HD inline void trace_sample(const TraceInput& in, const TraceOutput& out, int col, int row, int k) {
  const BevGeometry& g = in.grid;
  const std::size_t idx = static_cast<std::size_t>(k) * g.plane() + static_cast<std::size_t>(row) * g.cols + col;
  const double a = g.x0_mm + col * g.pitch_x_mm, b = g.y0_mm + row * g.pitch_y_mm;
  const double d = g.depth_mm(k);
  double c[3];
  in.ct_index_from_beam.apply(a * g.magnification_x(d), b * g.magnification_y(d), d, c);
  const TrilinearPoint at(in.ct_size, c[0], c[1], c[2]);
  const float s = at.of(in.rsp);
  const float rho = at.of(in.density_g_cm3);
  out.rsp[idx] = s;
  out.density_g_cm3[idx] = rho;
  out.rho_over_x[idx] = rho > static_cast<float>(kMinScatteringDensity)
                            ? static_cast<float>(rho * uniform_table(in.inverse_length_table, in.inverse_length_nodes,
                                                                     in.inv_density_step, static_cast<double>(rho)))
                            : 0.0f;
}

/// A ray's WEPL is summed in segments of this many slices: each segment's
/// water-equivalent thickness on its own, then the segments' in order, so
/// that the GPU sums a ray's segments in parallel (a thread each) in the same
/// order as the CPU. A thread per ray walking all of its ~256 slices left the
/// H100 with 925 warps for 29,584 rays, each waiting on one load per slice:
/// 122 µs of the water cube's trace (ncu).
constexpr int kTraceSegmentSlices = 16;

PD_HD inline int trace_segments(int slices) { return (slices + kTraceSegmentSlices - 1) / kTraceSegmentSlices; }

/// One past the last slice of segment `segment`.
PD_HD inline int trace_segment_end(const BevGeometry& g, int segment) {
  const int end = (segment + 1) * kTraceSegmentSlices;
  return end < g.slices ? end : g.slices;
}

/// A ray's step length along it per slice (mm).
PD_HD inline double trace_step_mm(const BevGeometry& g, int col, int row) {
  return g.depth_step_mm * g.path_per_depth(col, row);
}

/// After trace_sample of the slices of segment `segment` of ray `ray`: their
/// water-equivalent thickness (Σ rsp·step in slice order, double), and the
/// first of them inside the patient (density ≥ kPatientDensityThresholdGcm3,
/// ray_trace.h) and the first with any material (density > 0), −1 if none.
PD_HD inline double trace_segment_wet(const BevGeometry& g, const TraceOutput& out, std::size_t ray, int segment,
                                      double step_mm, int* entry_slice, int* first_material_slice) {
  const std::size_t plane = g.plane();
  const int end = trace_segment_end(g, segment);
  double wet = 0.0;
  int entry = -1, first = -1;
  for (int k = segment * kTraceSegmentSlices; k < end; ++k) {
    const std::size_t idx = static_cast<std::size_t>(k) * plane + ray;
    const float rho = out.density_g_cm3[idx];
    wet += static_cast<double>(out.rsp[idx]) * step_mm;
    if (entry < 0 && rho >= kPatientDensityThresholdGcm3) entry = k;
    if (first < 0 && rho > 0.0f) first = k;
  }
  *entry_slice = entry;
  *first_material_slice = first;
  return wet;
}

/// The WEPL to the far face of each slice of segment `segment` of ray `ray`:
/// `wepl_before_mm` (the earlier segments' thicknesses, trace_segment_wet,
/// added in order from 0) plus the segment's own running sum from 0.
PD_HD inline void trace_segment_wepl(const BevGeometry& g, const TraceOutput& out, std::size_t ray, int segment,
                                     double step_mm, double wepl_before_mm) {
  const std::size_t plane = g.plane();
  const int end = trace_segment_end(g, segment);
  double own = 0.0;
  for (int k = segment * kTraceSegmentSlices; k < end; ++k) {
    const std::size_t idx = static_cast<std::size_t>(k) * plane + ray;
    own += static_cast<double>(out.rsp[idx]) * step_mm;
    out.wepl_far_mm[idx] = static_cast<float>(wepl_before_mm + own);
  }
}

/// After trace_sample of every slice of ray (col, row): its step length, the
/// WEPL to each slice's far face (by segments, as the GPU), and, through the
/// pointers, the first slice inside the patient and the first with any
/// material, −1 if none (trace_segment_wet).
PD_HD inline void trace_wepl(const TraceInput& in, const TraceOutput& out, int col, int row, int* entry_slice,
                             int* first_material_slice) {
  const BevGeometry& g = in.grid;
  const std::size_t ray = static_cast<std::size_t>(row) * g.cols + col;
  const double step = trace_step_mm(g, col, row);
  out.step_mm[ray] = static_cast<float>(step);
  double wepl_before = 0.0;
  int entry = -1, first = -1;
  for (int segment = 0; segment < trace_segments(g.slices); ++segment) {
    int e, f;
    const double wet = trace_segment_wet(g, out, ray, segment, step, &e, &f);
    trace_segment_wepl(g, out, ray, segment, step, wepl_before);
    wepl_before += wet;
    if (entry < 0) entry = e;
    if (first < 0) first = f;
  }
  *entry_slice = entry;
  *first_material_slice = first;
}

/// Traces ray (col, row): trace_sample at every slice, then trace_wepl. (The
/// GPU runs them as separate kernels: a thread per sample, then a thread per
/// segment for its thickness and one for its WEPL; one thread per ray for
/// the whole left the H100 at 12 % occupancy.)
PD_HD inline void trace_ray(const TraceInput& in, const TraceOutput& out, int col, int row, int* entry_slice,
                            int* first_material_slice) {
  for (int k = 0; k < in.grid.slices; ++k) trace_sample(in, out, col, row, k);
  trace_wepl(in, out, col, row, entry_slice, first_material_slice);
}

/// Number of slices from `first` on whose near face lies before `cutoff_wepl_mm`
/// along ray `ray` (WEPL is non-decreasing along a ray: binary search).
PD_HD inline int slices_before_cutoff(const float* wepl_far_mm, std::size_t plane, std::size_t ray, int first,
                                      int slices, double cutoff_wepl_mm) {
  // wepl_near(k) = k == 0 ? 0 : wepl_far(k − 1); find the first k ≥ first with wepl_near ≥ cutoff.
  int lo = first, hi = slices;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    const double near = mid == 0 ? 0.0 : static_cast<double>(wepl_far_mm[static_cast<std::size_t>(mid - 1) * plane + ray]);
    if (near >= cutoff_wepl_mm) hi = mid;
    else lo = mid + 1;
  }
  return lo - first;
}

// ---------------------------------------------------------------------------
// Spot fluence (spot_fluence.h): each spot's protons spread over the rays with
// the pixel-integrated Gaussian of the layer's spread σ, cut at n_σ·σ.

/// Pixels [*lo, *hi] of one axis (n pixels) that a spot centred at c_px with
/// width s_px (pixels) reaches; empty when *lo > *hi. σ = 0: the nearest pixel.
PD_HD inline void spot_axis_range(double c_px, double s_px, double cutoff_sigmas, int n, int* lo, int* hi) {
  if (s_px <= 0.0) {
    const int i = static_cast<int>(llround(c_px));
    *lo = i;
    *hi = (i >= 0 && i < n) ? i : i - 1;
    return;
  }
  const double a = floor(c_px - cutoff_sigmas * s_px), b = ceil(c_px + cutoff_sigmas * s_px);
  *lo = a > 0 ? static_cast<int>(a) : 0;
  *hi = b < n - 1 ? static_cast<int>(b) : n - 1;
}

/// Weight of pixel i for a spot centred at c_px with width s_px (> 0; 1 for σ = 0).
PD_HD inline double spot_axis_weight(int i, double c_px, double s_px) {
  if (s_px <= 0.0) return 1.0;
  const double inv = 1.0 / (1.4142135623730951 * s_px);
  return 0.5 * (erf((i + 0.5 - c_px) * inv) - erf((i - 0.5 - c_px) * inv));
}

// ---------------------------------------------------------------------------
// Layer images and σ-maps

/// One node of a depth-dose curve as the layer images read it: the IDD is
/// linear between nodes, so the CIDD is quadratic on each segment. A node
/// holds what its segment's CIDD needs, in one 32-byte record: the GPU reads
/// it with two 16-byte loads, where four tables took four loads with an
/// address each (and four round trips: ~a quarter of the layer kernel's
/// instructions and stall samples went to the CIDD, ncu, water cube, H100).
struct alignas(16) CurveNode {
  double depth_mm;
  double cidd_mev;       ///< cumulative IDD at depth_mm (MeV per proton)
  double idd_mev_cm2_g;  ///< IDD at depth_mm
  double half_slope;     ///< ½ × the IDD's slope to the next node (0 at the last node)
};

/// How many nodes follow a curve's last in the arrays the layer images read
/// (curve_nodes): CiddWalk probes the next four nodes past its segment
/// without comparing their indices with the node count (the comparisons and
/// the placeholder depths took ~16 of the GPU step's ~408 instructions).
constexpr int kCurvePadNodes = 4;
/// The depth of those nodes (mm): beyond every WEPL a ray's face can have.
constexpr double kCurvePadDepthMm = 1.0e300;

/// The nodes of a curve with n ≥ 1 nodes of strictly increasing depth, then
/// kCurvePadNodes nodes at kCurvePadDepthMm (the last node's CIDD, no IDD):
/// n + kCurvePadNodes in all (curve_node_count gives n back).
inline std::vector<CurveNode> curve_nodes(const double* depth_mm, const double* idd, const double* cidd, int n) {
  std::vector<CurveNode> out(static_cast<std::size_t>(n + kCurvePadNodes));
  for (int i = 0; i < n; ++i) {
    const double slope = i + 1 < n ? (idd[i + 1] - idd[i]) / (depth_mm[i + 1] - depth_mm[i]) : 0.0;
    out[static_cast<std::size_t>(i)] = CurveNode{depth_mm[i], cidd[i], idd[i], 0.5 * slope};
  }
  for (int i = n; i < n + kCurvePadNodes; ++i)
    out[static_cast<std::size_t>(i)] = CurveNode{kCurvePadDepthMm, n > 0 ? cidd[n - 1] : 0.0, 0.0, 0.0};
  return out;
}
/// The curve's own nodes in an array of curve_nodes.
inline int curve_node_count(const std::vector<CurveNode>& nodes) {
  return static_cast<int>(nodes.size()) - kCurvePadNodes;
}

/// A node as the layer images read it: the GPU's layer kernel keeps its
/// layer's curve in shared memory (LayerSharedTables), read as two 16-byte
/// loads; from global memory, where the walk's loads waited on L2 at almost
/// every step (a third of the kernel's stall samples, ncu, water cube, H100),
/// the read-only path (__ldg) served it.
PD_HD inline CurveNode load_curve_node(const CurveNode* p) {
#ifdef __CUDA_ARCH__
  const double2 a = reinterpret_cast<const double2*>(p)[0];
  const double2 b = reinterpret_cast<const double2*>(p)[1];
  return CurveNode{a.x, a.y, b.x, b.y};
#else
  return *p;
#endif
}
PD_HD inline double load_curve_depth(const CurveNode* p) { return p->depth_mm; }

/// CIDD at w on the segment that starts at node s (physics::
/// CumulativeDepthDose::cidd_mev's formula; ½·slope is exact in binary).
PD_HD inline double cidd_on_segment(const CurveNode& s, double w) {
  constexpr double kGCm2PerMm = 0.1;
  const double t = w - s.depth_mm;
  return s.cidd_mev + kGCm2PerMm * t * (s.idd_mev_cm2_g + s.half_slope * t);
}

/// CIDD (MeV per proton) of a curve of n nodes, as physics::
/// CumulativeDepthDose::cidd_mev finds it: the segment from the depth when
/// the nodes d_1… are equally spaced by 1/inv_uniform_step (inv_uniform_step
/// > 0; a product where physics divides), else by bisection; then the same
/// formula. The results agree with physics' to rounding
/// (tests/engine/beam_kernels_test.cpp).
PD_HD inline double cidd_mev(const CurveNode* nodes, int n, double inv_uniform_step, double w) {
  if (n < 2 || w <= 0.0) return 0.0;
  if (w >= nodes[n - 1].depth_mm) return nodes[n - 1].cidd_mev;
  int lo;
  if (inv_uniform_step > 0.0) {
    if (w < nodes[1].depth_mm) {
      lo = 0;
    } else {
      const double i = floor((w - nodes[1].depth_mm) * inv_uniform_step) + 1.0;
      lo = i < n - 2 ? static_cast<int>(i) : n - 2;
    }
  } else {
    lo = 0;
    int hi = n - 1;  // depth[lo] <= w < depth[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (nodes[mid].depth_mm <= w) lo = mid;
      else hi = mid;
    }
  }
  return cidd_on_segment(nodes[lo], w);
}

/// The CIDD at the faces of one ray's slices, whose WEPL never decreases:
/// the segment is carried from face to face, and the next node's depth is
/// held, so a face that crosses no node reads only its segment. A face that
/// crosses nodes tests the next four per round, with independent loads (the
/// water cube's interpolated curves have 220–450 unequally spaced nodes,
/// some closer than 0.01 mm: a 1 mm step crosses ~2). The same segment and
/// formula as cidd_mev, so the same value bit for bit; equally spaced nodes
/// take cidd_mev's division. Precondition: each w ≥ the previous one, on
/// the same curve (given at every call, not held: the layer kernel reads it
/// from its shared copy of the layer's tables; held, its pointer, node count
/// and step took five of the kernel's 80 registers), laid out by curve_nodes:
/// the n nodes followed by kCurvePadNodes beyond every face (each w <
/// kCurvePadDepthMm), which the walk reads without a bound check.
class CiddWalk {
 public:
  PD_HD double at(const CurveNode* nodes, int n, double inv_uniform_step, double w) {
    if (inv_uniform_step > 0.0 || n < 2) return cidd_mev(nodes, n, inv_uniform_step, w);
    if (w <= 0.0) return 0.0;
    if (lo_ < 0) {  // the ray's first face
      lo_ = 0;
      next_depth_mm_ = load_curve_depth(nodes + 1);
    }
    if (w >= next_depth_mm_) walk(nodes, w);
    if (lo_ == n - 1) return load_curve_node(nodes + lo_).cidd_mev;  // at or past the last node
    return cidd_on_segment(load_curve_node(nodes + lo_), w);
  }

 private:
  /// Moves lo_ to the last node at or before w (n − 1: past the curve's
  /// end) and next_depth_mm_ to the depth of the node after it (∞ past the end).
  PD_HD void walk(const CurveNode* nodes, double w) {
    static_assert(kCurvePadNodes >= 4, "the walk reads four nodes past its segment, which may be the last");
    for (;;) {
      double d[4];
      int ahead = 0;  // the nodes ≤ w among lo_+1 … lo_+4 are a prefix of them (strictly increasing)
      for (int j = 0; j < 4; ++j) {
        d[j] = load_curve_depth(nodes + lo_ + 1 + j);  // past the last node: a pad, beyond w
        ahead += d[j] <= w ? 1 : 0;
      }
      lo_ += ahead;
      if (ahead < 4) {
        // d[ahead], loaded again: a select among the four took ~10 of the
        // GPU step's instructions, and the next face's compare is a step away.
        next_depth_mm_ = load_curve_depth(nodes + lo_ + 1);
        return;
      }
    }
  }

  int lo_ = -1;  ///< the segment of the last face; −1: none yet
  double next_depth_mm_ = 0.0;
};

/// The scalars the layer kernel reads about one energy layer.
struct LayerScalars {
  /// > 0: the CIDD nodes d_1… are equally spaced by its inverse (cidd_mev
  /// finds the segment by a product instead of a search); 0: they are not.
  double curve_inv_uniform_step_mm;
  double inv_wepl_step_mm;       ///< 1 / node spacing of the uniform WEPL tables
  double halo_max_wepl_mm;       ///< the halo tables' WEPL is clamped here
  /// halo_sigma_mm holds the width the halo adds to the pencil's own core in
  /// quadrature (Soukup et al. 2005), not a total width (the fitted model).
  bool halo_sigma_is_added;
  double spread_sigma_x_iso_mm, spread_sigma_y_iso_mm;
  double shifter_wet_mm;
  double cutoff_wepl_mm;
  /// Range-shifter exit moments, drifted per ray to the grid start (0 without a shifter).
  double shifter_a0_rad2, shifter_a1_rad_mm, shifter_a2_mm2;
  double shifter_drift_depth_mm;  ///< depth from the shifter's downstream face to the grid start
  bool has_shifter;
  int slices;                ///< the layer's slices of the cropped grid
  std::size_t stack_offset;  ///< its first stack slice
};

/// Everything the layer kernel reads about one energy layer (pointers into
/// host or device memory, as the backend). Real: the type of layer_ray<Real>'s
/// arithmetic, and of the tables it interpolates per step.
template <class Real>
struct LayerTables : LayerScalars {
  const double* fluence;  ///< [row][col] protons per ray (the spreading's double sums)
  /// The depth-dose curve: double in every instantiation (layer_ray evaluates the CIDD in double).
  const CurveNode* curve;  ///< curve_nodes nodes, then kCurvePadNodes pads (kernels::curve_nodes)
  int curve_nodes;
  /// Uniform WEPL tables, node i at i·wepl_step_mm after the range shifter:
  const Real* energy_mev;         ///< residual energy
  const Real* scattering_factor;  ///< T(E)·X/ρ: scattering power per unit ρ/X (rad²/mm · g/cm² / (g/cm³))
  const Real* halo_weight;        ///< nuclear halo energy fraction (null without halo)
  const Real* halo_sigma_mm;      ///< nuclear halo σ (mm)
  int wepl_nodes;
  const Real* air_sigma_x_mm;  ///< [slice] in-air spot σ at the slice centre
  const Real* air_sigma_y_mm;
};

/// Where the GPU's layer kernel puts a layer's tables in its dynamic shared
/// memory: the curve's nodes, the four WEPL tables (two without the halo)
/// and the two in-air σ tables, each from a 16-byte boundary. The layer
/// kernel reads every one of them at every step of every ray; from global
/// memory they waited on L2 (the blocks of an SM run different layers, and
/// the trace's samples stream through L1).
struct LayerSharedTables {
  std::size_t curve, energy, scattering, halo_weight, halo_sigma, air_x, air_y, bytes;

  /// curve_nodes: the curve's own; its kCurvePadNodes pads are placed after them.
  PD_HD LayerSharedTables(int curve_nodes, int wepl_nodes, bool halo, int slices) {
    std::size_t at = 0;
    const auto place = [&at](std::size_t size) {
      const std::size_t here = at;
      at += (size + 15) / 16 * 16;
      return here;
    };
    curve = place(static_cast<std::size_t>(curve_nodes + kCurvePadNodes) * sizeof(CurveNode));
    energy = place(static_cast<std::size_t>(wepl_nodes) * sizeof(float));
    scattering = place(static_cast<std::size_t>(wepl_nodes) * sizeof(float));
    halo_weight = place(halo ? static_cast<std::size_t>(wepl_nodes) * sizeof(float) : 0);
    halo_sigma = place(halo ? static_cast<std::size_t>(wepl_nodes) * sizeof(float) : 0);
    air_x = place(static_cast<std::size_t>(slices) * sizeof(float));
    air_y = place(static_cast<std::size_t>(slices) * sizeof(float));
    bytes = at;
  }
};

/// What every layer shares: the trace, the stack arrays and constants.
struct LayerStackArgs {
  BevGeometry grid;          ///< the cropped grid
  int trace_first_slice;     ///< cropped slice 0 = this slice of the full trace
  const float* wepl_far_mm;  ///< full trace arrays
  const float* density_g_cm3;
  const float* rho_over_x;  ///< full trace: ρ/X per sample
  const float* step_mm;
  float* image;          ///< stack arrays [stack slice][row][col]
  float* sigma_x_px;
  float* sigma_y_px;
  float* halo_image;     ///< null without halo, and on the GPU (its layer kernel stores column sums)
  float* halo_variance_mm2;
  /// The GPU's layer kernel stores the halo summed over groups of this many
  /// columns (halo_column_bin; ColumnBinnedHaloStore); the CPU ignores it.
  int halo_column_bin;
  bool dose_to_water;
  float cutoff_sigmas;         ///< kernel radius r = ceil(n_σ·σ) (float, as the superposition)
  double spot_cutoff_sigmas;   ///< the spot spreading's cut-off (double, as spot_fluence.h)
};

/// Below this residual energy (MeV) a proton is at the end of its range: the
/// Fermi–Eyges scattering power diverges as pv → 0, so the moments only drift
/// there (the dose beyond is the range-straggling tail, a few % of a mm).
constexpr double kMinScatteringEnergyMev = 1.0;

/// The constants of layer_ray<Real>'s slice step, in its arithmetic type: the
/// grid's depth, divergence and pitch, and the layer's WEPL table step and
/// spread widths. The GPU's layer kernel keeps them in shared memory
/// (layer_ray_constants, once per block): held in the step's locals, the loop
/// (64 registers) rematerialised them from the double grid and layer fields
/// at every step, a load and a conversion each (~12 of ~450 instructions per
/// step, SASS of the water cube's kernel). Plain data (shared memory needs
/// it): made only by layer_ray_constants.
template <class Real>
struct LayerRayConstants {
  Real depth0_mm, depth_step_mm;
  Real inv_sad_x, inv_sad_y;
  Real pitch_x_mm, pitch_y_mm;
  Real pixel_area_iso_mm2;  ///< pitch_x_mm · pitch_y_mm
  Real inv_wepl_step_mm;
  Real spread_x_iso_mm, spread_y_iso_mm;
};

/// layer_ray's constants for the grid g and layer L, rounded to Real as the
/// step has always rounded them.
template <class Real>
PD_HD inline LayerRayConstants<Real> layer_ray_constants(const BevGeometry& g, const LayerScalars& L) {
  LayerRayConstants<Real> c;
  c.depth0_mm = static_cast<Real>(g.depth0_mm);
  c.depth_step_mm = static_cast<Real>(g.depth_step_mm);
  c.inv_sad_x = static_cast<Real>(g.inv_sad_x);
  c.inv_sad_y = static_cast<Real>(g.inv_sad_y);
  c.pitch_x_mm = static_cast<Real>(g.pitch_x_mm);
  c.pitch_y_mm = static_cast<Real>(g.pitch_y_mm);
  c.pixel_area_iso_mm2 = c.pitch_x_mm * c.pitch_y_mm;
  c.inv_wepl_step_mm = static_cast<Real>(L.inv_wepl_step_mm);
  c.spread_x_iso_mm = static_cast<Real>(L.spread_sigma_x_iso_mm);
  c.spread_y_iso_mm = static_cast<Real>(L.spread_sigma_y_iso_mm);
  return c;
}

/// Where layer_ray's tables (L's curve, WEPL and in-air tables) are: in any
/// memory. The GPU's layer kernel, whose tables are in shared memory, says so
/// (its SharedTableSpace): read through generic pointers, each lookup was a
/// generic load, on the long scoreboard with the trace's loads from DRAM, so
/// that the CIDD walk's compare waited for the next step's trace samples
/// (a fifth of the kernel's stall samples, ncu, water cube, H100).
struct AnyTableSpace {
  template <class T>
  PD_HD static const T* of(const T* table) {
    return table;
  }
};

/// layer_ray's default observer: nothing.
struct NoPixelObserver {
  PD_HD void operator()(int /*slice*/, float /*image*/, float /*sigma_x_px*/, float /*sigma_y_px*/) const {}
};

/// layer_ray's default halo store: each pixel's halo share and variance into
/// the stack arrays s.halo_image and s.halo_variance_mm2 (when given), as
/// halo_bin_pixel reads them. The GPU's layer kernel stores sums over groups
/// of columns instead (ColumnBinnedHaloStore, engine/src/cuda/
/// beam_executor_gpu.cu; halo_bin_pixel_from_column_bins reads them).
struct PixelHaloStore {
  template <class Index>
  PD_HD void operator()(const LayerStackArgs& s, int /*slice*/, Index stack_index, bool on_grid, float share,
                        float variance_mm2) const {
    if (!s.halo_image || !on_grid) return;
    s.halo_image[stack_index] = share;
    s.halo_variance_mm2[stack_index] = variance_mm2;
  }
};

/// Fills the stack pixels of one ray of one layer: image (Gy), σx/σy (pixels)
/// and the halo share; returns the energy put into the stack (MeV), raises
/// *overshoot_px to the farthest a kernel reaches past the grid edge and
/// *max_halo_variance_mm2 to the largest halo variance stored under a non-zero
/// halo share (it sizes the coarse halo grid's pad).
/// Fermi–Eyges moments advance step by step along the ray (Gottschalk et al.,
/// NIM B 74:467 (1993)); the σ at a slice centre is the mean of the near- and
/// far-face variances.
/// Real: double on the CPU backend (the double-precision oracle), float on the
/// GPU. Whatever the type, the step's energy d_mev and the energy sum are
/// double, so the energy balance does not depend on it.
/// `observe(k, image, σx, σy)` is called once for every slice k of the layer,
/// in order, with the pixel as stored (zeros where the ray computes none, off
/// the grid included), so that a warp's lanes call it in step.
/// `store_halo(s, k, stack index, on grid, share, variance)` is called once
/// for every slice k of the layer, in order, cleared pixels (zeros) and rays
/// off the grid included: the GPU's store sums over the lanes of a warp.
/// A ray off the grid (col or row outside it: the GPU's lanes past a row's
/// last column) reads and writes nothing else and returns 0.
/// Index: the type of the trace and stack indices. The GPU passes a 32-bit
/// one where every index of the trace and the stack fits (the caller's
/// check): each of the step's stores and loads then takes one 32-bit
/// multiply-add for its address instead of a 64-bit shift and add (~25 of the
/// step's ~280 instructions, SASS of the water cube's kernel).
/// `c`: layer_ray_constants<Real>(s.grid, L) (the overload below makes it).
/// TableSpace: where L's tables are (AnyTableSpace: anywhere).
template <class Real, class PixelObserver = NoPixelObserver, class Index = std::size_t,
          class HaloStore = PixelHaloStore, class TableSpace = AnyTableSpace>
PD_HD inline double layer_ray(const LayerStackArgs& s, const LayerTables<Real>& L, const LayerRayConstants<Real>& c,
                              int col, int row, int* overshoot_px, float* max_halo_variance_mm2,
                              const PixelObserver& observe = PixelObserver{},
                              const HaloStore& store_halo = HaloStore{}) {
  const BevGeometry& g = s.grid;
  const Index plane = static_cast<Index>(g.plane());
  const bool on_grid = col >= 0 && col < g.cols && row >= 0 && row < g.rows;
  const Index ray = on_grid ? static_cast<Index>(row) * static_cast<Index>(g.cols) + static_cast<Index>(col) : Index(0);
  // In registers: read through L, the compiler reloads them after every store
  // to the stack (it cannot rule out aliasing), ~10 % of the kernel's stall
  // samples in the loop past the cut-off (ncu, H100).
  const int slices = L.slices;
  const Index stack_offset = static_cast<Index>(L.stack_offset);
  const double f = on_grid ? L.fluence[ray] : 0.0;
  // The ray still computes pixels: it carries protons, and its near face is
  // before the cut-off. Every stack pixel of this (layer, ray) is written,
  // zeros included, so the stack needs no clearing pass.
  bool live = f > 0;
  const Real step = live ? static_cast<Real>(s.step_mm[ray]) : Real(0);
  Real a0 = 0, a1 = 0, a2 = 0;
  if (L.has_shifter) {
    const Real dz = static_cast<Real>(L.shifter_drift_depth_mm) * step / static_cast<Real>(g.depth_step_mm);
    const Real s0 = static_cast<Real>(L.shifter_a0_rad2), s1 = static_cast<Real>(L.shifter_a1_rad_mm);
    a0 = s0;
    a1 = s1 + s0 * dz;
    a2 = static_cast<Real>(L.shifter_a2_mm2) + Real(2) * s1 * dz + s0 * dz * dz;
  }
  const double wet = L.shifter_wet_mm;
  double energy = 0.0;
  int overshoot = *overshoot_px;
  // The widest kernel of the ray's pixels (px; −1: none computed). The
  // overshoot is taken from it once, after the loop, instead of per pixel
  // (two radii and a comparison chain in every step).
  float widest_x_px = -1.0f, widest_y_px = -1.0f;
  float halo_variance_max = *max_halo_variance_mm2;
  // The CIDD stays double in every instantiation: a step's energy is the
  // difference of two cumulative integrals of up to the layer's whole energy
  // (~100 MeV), and in float each carries an error of its ulp, ~1e-5 MeV,
  // against ~0.5 MeV for 1 mm of water and 1000 times less in air. Rounded to
  // float, the CIDD put the dose behind a 30 mm range shifter off by 1.8e-4 of
  // D_max (the air before the patient: dose to water there is the plateau's).
  // The faces' WEPL never decreases along the ray: each lookup walks on from
  // the previous face's segment of the curve.
  CiddWalk walk;
  const auto cidd_at = [&](double wepl_mm) {
    return walk.at(TableSpace::of(L.curve), L.curve_nodes, L.curve_inv_uniform_step_mm, wepl_mm);
  };
  // The loop is bound by the latency of its loads (ncu, H100: half the stalls
  // wait on them), so the trace values of the next slice are loaded one step
  // ahead, and each face's WEPL is read once: a step's far face is the next
  // step's near face (both read wepl_far_mm of the same slice, and a far face
  // past the cut-off ends the ray's pixels), so each face's CIDD is evaluated
  // once too.
  Index idx = static_cast<Index>(s.trace_first_slice) * plane + ray;  // trace index of slice k
  Index sidx = stack_offset * plane + ray;                            // stack index of slice k
  float w_near_mm = 0.0f, next_w_far_mm = 0.0f, next_rho = 0.0f, next_rho_over_x = 0.0f;
  double cidd_near = 0.0;
  if (live) {
    w_near_mm = s.trace_first_slice == 0 ? 0.0f : s.wepl_far_mm[idx - plane];
    cidd_near = cidd_at(static_cast<double>(w_near_mm) + wet);
    if (slices > 0) {
      next_w_far_mm = s.wepl_far_mm[idx];
      next_rho = s.density_g_cm3[idx];
      next_rho_over_x = s.rho_over_x[idx];
    }
  }
  // Every lane of a warp runs all `slices` steps (the halo store's warp sums
  // need them in step); a ray past its cut-off, or without protons, stores zeros.
  for (int k = 0; k < slices; ++k, idx += plane, sidx += plane) {
    live = live && !(w_near_mm >= L.cutoff_wepl_mm);
    float image = 0.0f, spx = 0.0f, spy = 0.0f, halo_share = 0.0f, halo_variance = 0.0f;
    bool computed = false;
    if (live) {
      const float w_far_mm = next_w_far_mm;
      const Real rho = next_rho;
      const Real rho_over_x = next_rho_over_x;
      if (k + 1 < slices) {
        next_w_far_mm = s.wepl_far_mm[idx + plane];
        next_rho = s.density_g_cm3[idx + plane];
        next_rho_over_x = s.rho_over_x[idx + plane];
      }
      const Real w_near = w_near_mm, w_far = w_far_mm;
      w_near_mm = w_far_mm;  // the next step's near face
      const Real w_mid = Real(0.5) * (w_near + w_far);
      const double cidd_far = cidd_at(fmin(static_cast<double>(w_far_mm), L.cutoff_wepl_mm) + wet);
      const double d_mev = cidd_far - cidd_near;
      cidd_near = cidd_far;
      const Real d = c.depth0_mm + k * c.depth_step_mm;
      const Real mx = 1 + d * c.inv_sad_x, my = 1 + d * c.inv_sad_y;
      // Products with constants, not divisions: a float division is a
      // ~10-instruction sequence on the GPU, in a loop bound by its issue rate.
      const Real area_mm2 = c.pixel_area_iso_mm2 * mx * my;
      // Dose to water: the water-equivalent length at 1 g/cm³; else the medium's.
      constexpr Real kCm3PerMm3 = Real(1e-3);
      const Real mass_g = (s.dose_to_water ? w_far - w_near : rho * step) * area_mm2 * kCm3PerMm3;
      // The layer's WEPL tables share their nodes (≥ 2: a layer with slices
      // has a cut-off past 0 and tables to 20 mm beyond it): one lookup of the
      // node for the energy and the scattering power, one for the halo.
      const UniformTablePoint<Real> at_mid = uniform_table_point(L.wepl_nodes, c.inv_wepl_step_mm, w_mid);
      const Real e_mid = uniform_table_at(TableSpace::of(L.energy_mev), at_mid);
      const bool scatters = rho > static_cast<Real>(kMinScatteringDensity) &&
                            e_mid > static_cast<Real>(kMinScatteringEnergyMev);
      const Real a2_near = a2;
      // Drift, then (in matter) the step's own scattering at constant T: exact for constant T.
      a2 = a2 + Real(2) * a1 * step + a0 * step * step;
      a1 = a1 + a0 * step;
      if (scatters) {
        const Real t = uniform_table_at(TableSpace::of(L.scattering_factor), at_mid) * rho_over_x;
        a0 += t * step;
        a1 += t * step * step * Real(0.5);
        a2 += t * step * step * step * Real(1.0 / 3.0);
      }
      const Real a2_centre = Real(0.5) * (a2_near + a2);
      if (d_mev > 0 && mass_g > 0) {
        computed = true;
        const double step_energy_mev = f * d_mev;
        energy += step_energy_mev;
        const Real pixel_gy =
            result_divide(static_cast<Real>(step_energy_mev), mass_g) * static_cast<Real>(kGyPerMevPerGram);
        const Real sxm = c.spread_x_iso_mm * mx, sym = c.spread_y_iso_mm * my;
        // Kernel variances of the core: in-air growth beyond the spread, plus scattering.
        const Real air_x = TableSpace::of(L.air_sigma_x_mm)[k], air_y = TableSpace::of(L.air_sigma_y_mm)[k];
        const Real vx = air_x * air_x - sxm * sxm + a2_centre;
        const Real vy = air_y * air_y - sym * sym + a2_centre;
        if (L.halo_weight) {
          // Double-Gaussian pencil (da Silva et al., Front Oncol 5:281, 2015): the
          // fraction W of this step's energy spreads with the halo σ (total
          // width; the spread fluence already carries σ_spread).
          // The halo tables stop at halo_max_wepl_mm; before it (nearly
          // every step) their point is the step's own: the same bits, without
          // a second lookup (~10 of the GPU step's ~408 instructions).
          const Real halo_max_wepl = static_cast<Real>(L.halo_max_wepl_mm);
          const UniformTablePoint<Real> at_halo =
              w_mid <= halo_max_wepl ? at_mid : uniform_table_point(L.wepl_nodes, c.inv_wepl_step_mm, halo_max_wepl);
          const Real weight = uniform_table_at(TableSpace::of(L.halo_weight), at_halo);
          const Real sh = uniform_table_at(TableSpace::of(L.halo_sigma_mm), at_halo);
          const Real variance = L.halo_sigma_is_added
                                    ? sh * sh + Real(0.5) * (real_fmax(vx, Real(0)) + real_fmax(vy, Real(0)))
                                    : sh * sh - Real(0.5) * (sxm * sxm + sym * sym);
          halo_share = static_cast<float>(weight * pixel_gy);
          halo_variance = static_cast<float>(real_fmax(variance, Real(0)));
          if (halo_share > 0 && halo_variance > halo_variance_max) halo_variance_max = halo_variance;
          image = static_cast<float>((1 - weight) * pixel_gy);
        } else {
          image = static_cast<float>(pixel_gy);
        }
        spx = static_cast<float>(result_divide(result_sqrt(real_fmax(vx, Real(0))), c.pitch_x_mm * mx));
        spy = static_cast<float>(result_divide(result_sqrt(real_fmax(vy, Real(0))), c.pitch_y_mm * my));
      }
    }
    if (on_grid) {
      s.image[sidx] = image;
      s.sigma_x_px[sidx] = spx;
      s.sigma_y_px[sidx] = spy;
    }
    store_halo(s, k, sidx, on_grid, halo_share, halo_variance);
    observe(k, image, spx, spy);
    if (computed) {
      widest_x_px = spx > widest_x_px ? spx : widest_x_px;
      widest_y_px = spy > widest_y_px ? spy : widest_y_px;
    }
  }
  if (widest_x_px >= 0.0f) {
    // How far this ray's kernels reach past the grid edge: the radius is
    // monotonic in σ, so the farthest is that of its widest σx and σy.
    const int rx = gaussian_radius_px(widest_x_px, s.cutoff_sigmas);
    const int ry = gaussian_radius_px(widest_y_px, s.cutoff_sigmas);
    const int o1 = rx - col > col + rx - (g.cols - 1) ? rx - col : col + rx - (g.cols - 1);
    const int o2 = ry - row > row + ry - (g.rows - 1) ? ry - row : row + ry - (g.rows - 1);
    const int o = o1 > o2 ? o1 : o2;
    if (o > overshoot) overshoot = o;
  }
  *overshoot_px = overshoot;
  *max_halo_variance_mm2 = halo_variance_max;
  return energy;
}

/// layer_ray with its constants made from s.grid and L (one ray at a time;
/// the executors make them once per layer).
template <class Real, class PixelObserver = NoPixelObserver, class Index = std::size_t,
          class HaloStore = PixelHaloStore>
PD_HD inline double layer_ray(const LayerStackArgs& s, const LayerTables<Real>& L, int col, int row,
                              int* overshoot_px, float* max_halo_variance_mm2,
                              const PixelObserver& observe = PixelObserver{},
                              const HaloStore& store_halo = HaloStore{}) {
  return layer_ray<Real, PixelObserver, Index, HaloStore>(s, L, layer_ray_constants<Real>(s.grid, L), col, row,
                                                          overshoot_px, max_halo_variance_mm2, observe, store_halo);
}

// ---------------------------------------------------------------------------
// Nuclear halo on a coarse grid

/// The coarse halo grid: block f×f of fine pixels, padded by coarse pixels:
/// pad_cols columns before the fine grid's first block and pad_rows rows
/// (cols and rows say how many after it).
struct HaloBinning {
  int factor;     ///< f
  int pad_cols, pad_rows;
  int fine_cols, fine_rows;
  int cols, rows;  ///< coarse grid
  /// The input of halo_bin_pixel_from_column_bins (the GPU's): sums over
  /// groups of this many fine columns; f is a multiple of it.
  int column_bin;
};

/// Over how many columns the GPU's layer kernel sums the halo shares (and
/// their share-weighted variances) in a warp before it stores them: the
/// largest of 8, 4 and 2 that divides the halo grid's nominal factor (its
/// pitch in rays), else 1. The halo binning then reads f/b sums per fine row
/// of a coarse pixel instead of f pixels, and the layer kernel stores 2/b
/// floats per pixel for the halo instead of 2 (on the water cube, 8 mm halo
/// pixels over 1 mm rays: 1.5 GB less traffic per beam).
inline int halo_column_bin(int nominal_factor) {
  for (int b : {8, 4, 2})
    if (nominal_factor % b == 0) return b;
  return 1;
}

/// The halo grid's factor f (coarse pixel width in rays): the nominal one
/// (halo pitch / ray pitch), or the one that keeps the widest halo kernel
/// within the tile scatter's radius where that is larger, rounded up to a
/// multiple of the column bin b (so that a coarse pixel holds whole column
/// sums; b divides the nominal factor, so only the radius rule ever rounds).
inline int halo_factor(int nominal_factor, int radius_factor, int column_bin) {
  const int f = nominal_factor > radius_factor ? nominal_factor : radius_factor;
  const int b = column_bin > 1 ? column_bin : 1;
  return (f + b - 1) / b * b;
}

/// A coarse pixel from its block's sums: the block mean of the halo dose
/// and the share-weighted kernel σ (pixels of the coarse grid at that depth);
/// zeros where the block holds no share (a NaN sum goes on to the output).
PD_HD inline void halo_block_result(const HaloBinning& h, double sum, double weighted_variance, double px_mm,
                                    double py_mm, float* image_out, float* sx_out, float* sy_out) {
  if (sum <= 0) {
    *image_out = 0.0f;
    *sx_out = 0.0f;
    *sy_out = 0.0f;
    return;
  }
  // Block mean of the dose: the coarse pixel holds the same energy per area.
  *image_out = static_cast<float>(sum / (static_cast<double>(h.factor) * h.factor));
  const double sigma_mm = sqrt(weighted_variance / sum);
  *sx_out = static_cast<float>(sigma_mm / px_mm);
  *sy_out = static_cast<float>(sigma_mm / py_mm);
}

/// The coarse pixels whose fine block (halo_bin_pixel_from_column_bins: rows
/// [(r − pad_rows)·f, … + f) and columns [(c − pad_cols)·f, … + f)) meets a fine slice's box
/// (SuperpositionInput::slice_box; begin ≥ 0): where the fine slice is zero
/// outside its box, the coarse slice is zero outside this one. An empty box
/// gives an empty box.
PD_HD inline SliceBox coarse_slice_box(const SliceBox& fine, const HaloBinning& h) {
  SliceBox c;  // empty
  if (fine.col_begin >= fine.col_end || fine.row_begin >= fine.row_end) return c;
  c.col_begin = h.pad_cols + fine.col_begin / h.factor;
  c.col_end = h.pad_cols + (fine.col_end + h.factor - 1) / h.factor;
  c.row_begin = h.pad_rows + fine.row_begin / h.factor;
  c.row_end = h.pad_rows + (fine.row_end + h.factor - 1) / h.factor;
  return c;
}

/// (Merging the layers of one depth as well, into one coarse slice per depth,
/// was tried: 15× fewer halo slices on the water cube, but a mixture of narrow
/// and wide halos is not one Gaussian of their mean variance — the water_dcpt
/// maximum dropped 3 % — so each layer keeps its own coarse slice.)
/// One coarse pixel q of one stack slice: the block mean of the halo dose and
/// its energy-weighted kernel σ (pixels of the coarse grid at that depth).
/// px_mm, py_mm: coarse pixel size at the slice's depth.
PD_HD inline void halo_bin_pixel(const HaloBinning& h, const float* halo_image, const float* halo_variance_mm2,
                                 int coarse_row, int coarse_col, double px_mm, double py_mm, float* image_out,
                                 float* sx_out, float* sy_out) {
  const int r0 = (coarse_row - h.pad_rows) * h.factor, c0 = (coarse_col - h.pad_cols) * h.factor;
  double sum = 0, weighted_variance = 0;
  if (r0 >= 0 && c0 >= 0) {
    for (int r = r0; r < r0 + h.factor && r < h.fine_rows; ++r)
      for (int c = c0; c < c0 + h.factor && c < h.fine_cols; ++c) {
        const std::size_t p = static_cast<std::size_t>(r) * h.fine_cols + c;
        const float v = halo_image[p];
        if (v <= 0) continue;
        sum += v;
        weighted_variance += static_cast<double>(v) * halo_variance_mm2[p];
      }
  }
  halo_block_result(h, sum, weighted_variance, px_mm, py_mm, image_out, sx_out, sy_out);
}

/// halo_bin_pixel from sums over groups of h.column_bin fine columns
/// (column bin j of a row: columns j·b … j·b + b − 1, those on the grid):
/// `share_sum` the halo shares, `weighted_sum` the shares times their
/// variances (mm²), each [row][ceil(fine_cols / b)] for one stack slice, a
/// share ≤ 0 left out of both. The same block sums as halo_bin_pixel's, in
/// double as there, added in another order.
/// `fine_box` (the stack slice's SliceBox, begin ≥ 0; null: the whole
/// slice): only the bins that reach into it are read (rows inside it, bins
/// with a column inside it), the others count as 0 without being read —
/// the GPU's layer kernel writes no other. Bitwise the same sums where the
/// others hold 0 (they would be added as +0, in the same order).
PD_HD inline void halo_bin_pixel_from_column_bins(const HaloBinning& h, const double* share_sum,
                                                  const double* weighted_sum, int coarse_row, int coarse_col,
                                                  double px_mm, double py_mm, float* image_out, float* sx_out,
                                                  float* sy_out, const SliceBox* fine_box = nullptr) {
  const int b = h.column_bin;
  const int bins_per_row = (h.fine_cols + b - 1) / b;
  int r0 = (coarse_row - h.pad_rows) * h.factor, c0 = (coarse_col - h.pad_cols) * h.factor;
  double sum = 0, weighted_variance = 0;
  if (r0 >= 0 && c0 >= 0) {
    int j0 = c0 / b, j_end = j0 + h.factor / b < bins_per_row ? j0 + h.factor / b : bins_per_row;
    int r_end = r0 + h.factor < h.fine_rows ? r0 + h.factor : h.fine_rows;
    if (fine_box) {  // the block's rows and bins that reach into the box
      const SliceBox& f = *fine_box;
      if (f.row_begin > r0) r0 = f.row_begin;
      if (f.row_end < r_end) r_end = f.row_end;
      if (f.col_begin / b > j0) j0 = f.col_begin / b;
      if (f.col_end <= 0) j_end = j0;
      else if ((f.col_end + b - 1) / b < j_end) j_end = (f.col_end + b - 1) / b;
    }
    const int row_bins = j_end - j0, count = r_end > r0 && row_bins > 0 ? (r_end - r0) * row_bins : 0;
    // The block's bins row by row, in batches whose loads are all issued
    // before the first add: one after the other, each waited for its load
    // (~0.6 µs from DRAM), and the GPU's binning was 200 µs for the water
    // cube's 3,211 coarse slices (H200), bound by that latency.
    constexpr int kBatch = 8;
    int r = r0, j = j0;  // the next bin
    for (int first = 0; first < count; first += kBatch) {
      double s[kBatch], w[kBatch];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
      for (int u = 0; u < kBatch; ++u) {
        const bool in_block = first + u < count;
        const std::size_t p = static_cast<std::size_t>(r) * bins_per_row + j;
        s[u] = in_block ? share_sum[p] : 0.0;
        w[u] = in_block ? weighted_sum[p] : 0.0;
        if (++j == j_end) {
          j = j0;
          ++r;
        }
      }
      // (Past the block the terms are +0: the sums are unchanged, bitwise.)
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
      for (int u = 0; u < kBatch; ++u) {
        sum += s[u];
        weighted_variance += w[u];
      }
    }
  }
  halo_block_result(h, sum, weighted_variance, px_mm, py_mm, image_out, sx_out, sy_out);
}

// ---------------------------------------------------------------------------
// Back to the patient

/// n / d for 0 ≤ n < 2³¹ and a divisor d ≥ 1 known at launch, by a multiply
/// and a shift (the round-up method of Granlund & Montgomery, PLDI 1994, as
/// CUTLASS's FastDivmod): a division by a runtime divisor is a ~30-instruction
/// sequence on the GPU, and resample_finish_kernel spent 98 of its 548
/// instructions per voxel on three of them (ncu, water cube, H200).
struct IndexDivisor {
  unsigned divisor = 1;
  unsigned multiplier = 0;  ///< ceil(2^p / d), p = 31 + ceil(log2 d); unused for d = 1
  unsigned shift = 0;       ///< p − 32

  IndexDivisor() = default;
  explicit IndexDivisor(unsigned d) : divisor(d) {
    if (d <= 1) return;
    unsigned ceil_log2 = 0;
    while ((1ull << ceil_log2) < d) ++ceil_log2;
    const unsigned p = 31 + ceil_log2;
    multiplier = static_cast<unsigned>(((1ull << p) + d - 1) / d);
    shift = p - 32;
  }
  PD_HD unsigned quotient(unsigned n) const {
    if (divisor == 1) return n;
#ifdef __CUDA_ARCH__
    const unsigned high = __umulhi(n, multiplier);
#else
    const unsigned high = static_cast<unsigned>((static_cast<unsigned long long>(n) * multiplier) >> 32);
#endif
    return high >> shift;
  }
};

/// (i, j, k) of the flat index v = (k·ny + j)·nx + i of an nx × ny × nz grid:
/// by IndexDivisor below 2³¹ voxels, by 64-bit division beyond.
struct VoxelIndexer {
  int nx = 1, ny = 1;
  bool small = true;  ///< fewer than 2³¹ voxels
  IndexDivisor by_nx, by_ny;

  VoxelIndexer() = default;
  VoxelIndexer(int nx_, int ny_, int nz_)
      : nx(nx_), ny(ny_),
        small(static_cast<unsigned long long>(nx_) * static_cast<unsigned long long>(ny_) *
                  static_cast<unsigned long long>(nz_) < (1ull << 31)),
        by_nx(static_cast<unsigned>(nx_)), by_ny(static_cast<unsigned>(ny_)) {}

  PD_HD void split(std::size_t v, int* i, int* j, int* k) const {
    if (small) {
      const unsigned u = static_cast<unsigned>(v);
      const unsigned row = by_nx.quotient(u);  // k·ny + j
      const unsigned slab = by_ny.quotient(row);
      *i = static_cast<int>(u - row * static_cast<unsigned>(nx));
      *j = static_cast<int>(row - slab * static_cast<unsigned>(ny));
      *k = static_cast<int>(slab);
      return;
    }
    const std::size_t row = v / static_cast<std::size_t>(nx);
    *i = static_cast<int>(v - row * static_cast<std::size_t>(nx));
    *j = static_cast<int>(row % static_cast<std::size_t>(ny));
    *k = static_cast<int>(row / static_cast<std::size_t>(ny));
  }
};

/// Trilinear sample of a BEV array [slice][row][col] at fractional
/// (col, row, slice); 0 beyond the half-pixel border.
/// Real: the type of the fractional position, the weights and the
/// eight-point blend. The CPU, the oracle, works in double; the GPU's
/// resampling in float: in double, the 16.7 M voxels of the water cube's
/// dose (two samples each, core and halo) kept the H100 at its instruction
/// issue limit (305 µs, ~480 instructions a voxel; ncu). The sample then
/// moves by a few float ulps of the dose, and by up to ~10⁻⁵ pixel of
/// position (the index is found in double and rounded once).
template <class Real = double>
PD_HD inline float sample_bev_index(const BevGeometry& g, const float* bev, Real col, Real row, Real slice) {
  int c0, c1, r0, r1, s0, s1;
  Real fc, fr, fs;
  if (!axis_lerp(col, g.cols, c0, c1, fc) || !axis_lerp(row, g.rows, r0, r1, fr) || !axis_lerp(slice, g.slices, s0, s1, fs))
    return 0.0f;
  // Two slice planes, each indexed within (a plane has fewer than 2³¹ pixels).
  const std::size_t plane = g.plane();
  const float* p0 = bev + static_cast<std::size_t>(s0) * plane;
  const float* p1 = bev + static_cast<std::size_t>(s1) * plane;
  const int o00 = r0 * g.cols + c0, o01 = r0 * g.cols + c1, o10 = r1 * g.cols + c0, o11 = r1 * g.cols + c1;
  const Real one = 1;
  const auto at = [](const float* p, int o) { return static_cast<Real>(p[o]); };
  const Real a0 = (at(p0, o00) * (one - fc) + at(p0, o01) * fc) * (one - fr) +
                  (at(p0, o10) * (one - fc) + at(p0, o11) * fc) * fr;
  const Real a1 = (at(p1, o00) * (one - fc) + at(p1, o01) * fc) * (one - fr) +
                  (at(p1, o10) * (one - fc) + at(p1, o11) * fc) * fr;
  return static_cast<float>(a0 * (one - fs) + a1 * fs);
}

/// Trilinear sample of a BEV array at a beam-frame point (x, y, depth); 0
/// outside. The fractional index is found in double, then taken as Real.
template <class Real = double>
PD_HD inline float sample_bev_at(const BevGeometry& g, const float* bev, double x, double y, double d) {
  // At the isocentre plane (a parallel beam everywhere: 1/SAD = 0, no division).
  const double x_iso = g.inv_sad_x == 0.0 ? x : x / g.magnification_x(d);
  const double y_iso = g.inv_sad_y == 0.0 ? y : y / g.magnification_y(d);
  return sample_bev_index<Real>(g, bev, static_cast<Real>((x_iso - g.x0_mm) * g.inv_pitch_x_mm),
                                static_cast<Real>((y_iso - g.y0_mm) * g.inv_pitch_y_mm),
                                static_cast<Real>((d - g.depth0_mm) * g.inv_depth_step_mm));
}

/// The fractional BEV index (col, row, slice) of the points p(u) = p + u·dp,
/// u = 0, 1, 2, … (beam frame): a run of output voxels along a row of the
/// dose grid, dp its step. Found in double at u = 0 and stepped in float:
/// the depth is linear in u, and so is the column of a parallel axis; on a
/// divergent one (x and the magnification m both linear in u)
///   x(u)/m(u) − x(0)/m(0) = u·(dx·m(0) − x(0)·dm) / (m(0)·m(u)),
/// so c(u) = c(0) + u·k / m(u) with k found once: the float step carries
/// only its own rounding on top of c(0)'s (the column itself is never the
/// difference of two large floats). Found per voxel in double, the point and
/// the index were a quarter of the GPU resampling's instructions (ncu, water
/// cube, H100: 224.6 → 163.4 M warp instructions, 258 → 201 µs, with runs of
/// four voxels per thread).
struct BevIndexLine {
  float col0, row0, slice0;  ///< at u = 0, each rounded once from double
  float col_k, row_k;        ///< k of the formula above, in px (pitch and m(0) divided out)
  float mx0, mx_step, my0, my_step;  ///< magnification at u = 0 and its step (1 and 0: parallel)
  float slice_step;

  PD_HD BevIndexLine(const BevGeometry& g, const double p[3], const double dp[3]) {
    const double mx = g.magnification_x(p[2]), my = g.magnification_y(p[2]);
    const double dmx = dp[2] * g.inv_sad_x, dmy = dp[2] * g.inv_sad_y;
    // One division per divergent axis (a double division is a ~20-instruction
    // sequence on the GPU), none on a parallel one (m = 1).
    const double inv_mx = g.inv_sad_x == 0.0 ? 1.0 : 1.0 / mx, inv_my = g.inv_sad_y == 0.0 ? 1.0 : 1.0 / my;
    col0 = static_cast<float>((p[0] * inv_mx - g.x0_mm) * g.inv_pitch_x_mm);
    row0 = static_cast<float>((p[1] * inv_my - g.y0_mm) * g.inv_pitch_y_mm);
    slice0 = static_cast<float>((p[2] - g.depth0_mm) * g.inv_depth_step_mm);
    col_k = static_cast<float>((dp[0] * mx - p[0] * dmx) * inv_mx * g.inv_pitch_x_mm);
    row_k = static_cast<float>((dp[1] * my - p[1] * dmy) * inv_my * g.inv_pitch_y_mm);
    mx0 = static_cast<float>(mx);
    my0 = static_cast<float>(my);
    mx_step = static_cast<float>(dmx);
    my_step = static_cast<float>(dmy);
    slice_step = static_cast<float>(dp[2] * g.inv_depth_step_mm);
  }

  /// The index of point u, in float.
  PD_HD void at(int u, float* col, float* row, float* slice) const {
    const float fu = static_cast<float>(u);
    *col = col0 + result_divide(fu * col_k, mx0 + fu * mx_step);
    *row = row0 + result_divide(fu * row_k, my0 + fu * my_step);
    *slice = slice0 + fu * slice_step;
  }

  /// Trilinear sample of bev (on grid g, the grid of this line) at point u; 0 outside.
  PD_HD float sample(const BevGeometry& g, const float* bev, int u) const {
    float col, row, slice;
    at(u, &col, &row, &slice);
    return sample_bev_index<float>(g, bev, col, row, slice);
  }
};

/// Adds the BEV dose at beam-frame point p to *dose_voxel.
template <class Real = double>
PD_HD inline void resample_point(const BevGeometry& g, const float* bev, const double p[3], float* dose_voxel) {
  const float v = sample_bev_at<Real>(g, bev, p[0], p[1], p[2]);
  if (v != 0.0f) *dose_voxel += v;
}

/// Adds the BEV dose at output voxel (i, j, k) to dose[voxel].
template <class Real = double>
PD_HD inline void resample_voxel(const BevGeometry& g, const float* bev, const Affine3& beam_from_index, int i, int j,
                                 int k, float* dose_voxel) {
  double p[3];
  beam_from_index.apply(i, j, k, p);
  resample_point<Real>(g, bev, p, dose_voxel);
}

#undef PD_HD

}  // namespace protondose::engine::kernels
