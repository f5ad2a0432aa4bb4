// The host/device arithmetic of engine/src/beam_kernels.h against the
// functions it re-implements for the GPU (physics' CIDD lookup, a linear scan
// for the cut-off search): the CPU backend runs these same functions, so a
// slip here would move both backends together and only these tests see it.
#include <gtest/gtest.h>

#include <array>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "beam_kernels.h"
#include "protondose/physics/beam_model.h"

namespace k = protondose::engine::kernels;

namespace {

/// The curve's nodes as the layer images read them (kernels::curve_nodes:
/// padded; curve_node_count gives the curve's own).
std::vector<k::CurveNode> curve_nodes_of(const protondose::physics::CumulativeDepthDose& c) {
  return k::curve_nodes(c.depth_mm().data(), c.idd_nodes_mev_cm2_g().data(), c.cidd_nodes_mev().data(),
                        static_cast<int>(c.depth_mm().size()));
}

}  // namespace

TEST(BeamKernels, CiddLookupEqualsThePhysicsCurveByDivisionAndByBisection) {
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  int uniform_curves = 0;
  for (double e : {70.0, 118.0, 150.0, 226.0}) {
    const protondose::physics::CumulativeDepthDose c = machine.depth_dose(e);
    if (c.uniform_step_mm() > 0) ++uniform_curves;
    const std::vector<k::CurveNode> nodes = curve_nodes_of(c);
    const int n = k::curve_node_count(nodes);
    const double inv_step = c.uniform_step_mm() > 0 ? 1.0 / c.uniform_step_mm() : 0.0;
    for (double w = -1.0; w <= c.end_depth_mm() + 2.0; w += 0.0173) {
      const double expected = c.cidd_mev(w);
      const double bisected = k::cidd_mev(nodes.data(), n, 0.0, w);
      const double divided = k::cidd_mev(nodes.data(), n, inv_step, w);
      ASSERT_NEAR(bisected, expected, 1e-12 * c.total_energy_mev()) << e << " MeV, " << w << " mm";
      ASSERT_NEAR(divided, expected, 1e-12 * c.total_energy_mev()) << e << " MeV, " << w << " mm";
    }
  }
  EXPECT_GT(uniform_curves, 0) << "no curve exercised the equally-spaced shortcut";
}

TEST(BeamKernels, CiddWalkedAlongARayEqualsTheBisectionBitwise) {
  // The layer kernel carries the curve segment from face to face of a ray
  // (the WEPL never decreases); what it finds must be what the bisection
  // finds, bit for bit, or the CPU oracle and the GPU would drift apart from
  // a bisecting reference. Interpolated energies: unequally spaced nodes,
  // some closer than 0.01 mm, so a 1 mm step crosses several at once.
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> step_mm(0.0, 3.0);
  int walked_curves = 0, long_walks = 0;
  for (double e : {118.12, 141.3, 172.51}) {
    const protondose::physics::CumulativeDepthDose c = machine.depth_dose(e);
    if (c.uniform_step_mm() > 0) continue;  // the walk is for unequally spaced nodes
    ++walked_curves;
    const std::vector<k::CurveNode> nodes = curve_nodes_of(c);
    const int n = k::curve_node_count(nodes);
    const auto bisected = [&](double w) { return k::cidd_mev(nodes.data(), n, 0.0, w); };
    for (int ray = 0; ray < 50; ++ray) {
      k::CiddWalk walk;
      // Steps of 0–3 mm, a repeated depth, jumps over many nodes (more than
      // one round of four), to and past the last node.
      for (double w = -0.5; w < c.end_depth_mm() + 5.0; w += (ray % 10 == 0 ? 17.0 : step_mm(rng))) {
        ASSERT_EQ(walk.at(nodes.data(), n, 0.0, w), bisected(w)) << e << " MeV, ray " << ray << ", " << w << " mm";
        ASSERT_EQ(walk.at(nodes.data(), n, 0.0, w), bisected(w)) << "the same depth twice, " << w << " mm";
      }
      if (ray % 10 == 0) ++long_walks;
    }
    // Exactly on nodes, the last one included, and past the end.
    k::CiddWalk walk;
    const auto walked = [&](double w) { return walk.at(nodes.data(), n, 0.0, w); };
    for (int i = 1; i < n; i += 7) ASSERT_EQ(walked(nodes[i].depth_mm), bisected(nodes[i].depth_mm)) << "node " << i;
    EXPECT_EQ(walked(nodes[n - 1].depth_mm), nodes[n - 1].cidd_mev);
    EXPECT_EQ(walked(nodes[n - 1].depth_mm + 1.0), nodes[n - 1].cidd_mev);
  }
  EXPECT_GT(walked_curves, 0) << "no curve with unequally spaced nodes";
  EXPECT_GT(long_walks, 0);
}

TEST(BeamKernels, CiddWalkOnEquallySpacedNodesTakesTheDivision) {
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  for (double e : {70.0, 118.0, 150.0, 226.0}) {
    const protondose::physics::CumulativeDepthDose c = machine.depth_dose(e);
    if (c.uniform_step_mm() <= 0) continue;
    const std::vector<k::CurveNode> nodes = curve_nodes_of(c);
    const int n = k::curve_node_count(nodes);
    const double inv_step = 1.0 / c.uniform_step_mm();
    k::CiddWalk walk;
    for (double w = -0.5; w < c.end_depth_mm() + 5.0; w += 0.731)
      ASSERT_EQ(walk.at(nodes.data(), n, inv_step, w), k::cidd_mev(nodes.data(), n, inv_step, w)) << e << " MeV, " << w;
  }
}

TEST(BeamKernels, CurveNodesHoldEachSegmentsHalfSlope) {
  const std::vector<double> depth = {0.0, 1.0, 3.0, 3.5}, idd = {2.0, 4.0, 1.0, 0.5}, cidd = {0.0, 0.3, 0.8, 0.9};
  const std::vector<k::CurveNode> nodes = k::curve_nodes(depth.data(), idd.data(), cidd.data(), 4);
  ASSERT_EQ(k::curve_node_count(nodes), 4);
  ASSERT_EQ(nodes.size(), 4u + k::kCurvePadNodes);
  EXPECT_EQ(nodes[0].half_slope, 1.0);
  EXPECT_EQ(nodes[1].half_slope, -0.75);
  EXPECT_EQ(nodes[2].half_slope, -0.5);
  EXPECT_EQ(nodes[3].half_slope, 0.0);
  EXPECT_EQ(nodes[2].depth_mm, 3.0);
  EXPECT_EQ(nodes[2].cidd_mev, 0.8);
  EXPECT_EQ(nodes[2].idd_mev_cm2_g, 1.0);
  // On its segment: cidd + 0.1·t·(idd + ½·slope·t) (per mm of water, 0.1 g/cm²).
  EXPECT_DOUBLE_EQ(k::cidd_mev(nodes.data(), 4, 0.0, 2.0), 0.3 + 0.1 * 1.0 * (4.0 - 0.75 * 1.0));
  // The pads the walk reads past the last node: beyond every depth, the last CIDD, no IDD.
  for (std::size_t i = 4; i < nodes.size(); ++i) {
    EXPECT_EQ(nodes[i].depth_mm, k::kCurvePadDepthMm);
    EXPECT_EQ(nodes[i].cidd_mev, 0.9);
    EXPECT_EQ(nodes[i].idd_mev_cm2_g, 0.0);
    EXPECT_EQ(nodes[i].half_slope, 0.0);
  }
}

// The branch-free lookup that layer_ray shares between tables on the same
// nodes: the interpolation between nodes, and the clamping at both ends
// (below the first node, NaN, at and past the last), exact at the ends.
template <class Real>
void check_uniform_table() {
  const std::vector<Real> t = {Real(3.5), Real(-1.25), Real(7), Real(2.0625), Real(-0.5)};
  const int n = static_cast<int>(t.size());
  const Real inv_step = Real(0.5);  // nodes every 2 units
  const auto naive = [&](Real x) {
    const double u = static_cast<double>(x) * static_cast<double>(inv_step);
    if (!(u > 0)) return static_cast<double>(t[0]);
    if (u >= n - 1) return static_cast<double>(t[n - 1]);
    const int i = static_cast<int>(u);
    const double f = u - i;
    return static_cast<double>(t[i]) * (1 - f) + static_cast<double>(t[i + 1]) * f;
  };
  for (const Real x : {Real(-3), Real(0), Real(0.5), Real(2), Real(3.75), Real(6.5), Real(7.999), Real(8), Real(8.5),
                       Real(1e30), std::numeric_limits<Real>::quiet_NaN()}) {
    const Real got = k::uniform_table(t.data(), n, inv_step, x);
    const double expected = naive(x);
    if (!(x > 0) || x >= Real(8)) {
      EXPECT_EQ(got, static_cast<Real>(expected)) << "x " << x;  // the end nodes exactly
    } else {
      EXPECT_NEAR(got, expected, 8 * std::numeric_limits<Real>::epsilon() * 8) << "x " << x;
    }
    // One point, two tables: the same as two lookups.
    const k::UniformTablePoint<Real> p = k::uniform_table_point(n, inv_step, x);
    ASSERT_GE(p.i, 0);
    ASSERT_LE(p.i, n - 2);
    EXPECT_EQ(k::uniform_table_at(t.data(), p), got) << "x " << x;
  }
  const Real one = Real(4);
  EXPECT_EQ(k::uniform_table(&one, 1, inv_step, Real(3)), one);  // a one-node table is its node
}

TEST(BeamKernels, UniformTableInterpolatesAndClampsAtBothEndsExactly) {
  check_uniform_table<double>();
  check_uniform_table<float>();
}

TEST(BeamKernels, CutoffSearchEqualsALinearScan) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> step(0.0f, 2.5f);
  const std::size_t plane = 3;
  const int slices = 60;
  std::vector<float> wepl_far(plane * slices);
  for (std::size_t ray = 0; ray < plane; ++ray) {
    float w = 0;
    for (int s = 0; s < slices; ++s) wepl_far[static_cast<std::size_t>(s) * plane + ray] = w += (s % 7 == 0 ? 0.0f : step(rng));
  }
  for (std::size_t ray = 0; ray < plane; ++ray)
    for (int first : {0, 1, 17})
      for (double cutoff : {0.0, 0.5, 10.0, 33.3, 70.0, 1e6}) {
        int k = first;
        while (k < slices && (k == 0 ? 0.0 : wepl_far[static_cast<std::size_t>(k - 1) * plane + ray]) < cutoff) ++k;
        EXPECT_EQ(k::slices_before_cutoff(wepl_far.data(), plane, ray, first, slices, cutoff), k - first)
            << "ray " << ray << ", first " << first << ", cut-off " << cutoff;
      }
}

// trace_wepl sums a ray in segments (kTraceSegmentSlices; the GPU a thread
// per segment): 37 slices make two whole segments and a part. The WEPL must
// stay a running sum (to float rounding), exact within the first segment,
// and the first material and patient slices may lie in any segment.
TEST(BeamKernels, TraceWeplBySegmentsIsTheRunningSumAndFindsTheFirstMaterialInAnySegment) {
  k::BevGeometry g{};
  g.cols = 4;
  g.rows = 1;
  g.slices = 2 * k::kTraceSegmentSlices + 5;
  g.depth_step_mm = 1.5;
  g.pitch_x_mm = g.pitch_y_mm = 1.0;
  const std::size_t plane = g.plane(), n = plane * static_cast<std::size_t>(g.slices);
  ASSERT_EQ(k::trace_segments(g.slices), 3);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> rsp(0.0f, 1.8f);
  std::vector<float> stopping(n), density(n, 0.0f), wepl_far(n, -1.0f), rho_over_x(n), step(plane);
  for (float& s : stopping) s = rsp(rng);
  // Ray c: material from slice first[c] (0.01 g/cm³, below the patient's
  // threshold) and the patient from entry[c]; the last ray is all air.
  const int first[4] = {0, 15, 17, 1000}, entry[4] = {3, 17, 36, 1000};
  for (std::size_t ray = 0; ray < plane; ++ray)
    for (int kk = 0; kk < g.slices; ++kk)
      density[static_cast<std::size_t>(kk) * plane + ray] = kk >= entry[ray] ? 1.0f : kk >= first[ray] ? 0.01f : 0.0f;
  const k::TraceOutput out{stopping.data(), density.data(), wepl_far.data(), rho_over_x.data(), step.data()};
  k::TraceInput in{};
  in.grid = g;
  for (int c = 0; c < g.cols; ++c) {
    int found_entry = -2, found_first = -2;
    k::trace_wepl(in, out, c, 0, &found_entry, &found_first);
    EXPECT_EQ(found_first, first[c] < g.slices ? first[c] : -1) << "ray " << c;
    EXPECT_EQ(found_entry, entry[c] < g.slices ? entry[c] : -1) << "ray " << c;
    EXPECT_EQ(step[static_cast<std::size_t>(c)], 1.5f);
    double running = 0;
    for (int kk = 0; kk < g.slices; ++kk) {
      const std::size_t i = static_cast<std::size_t>(kk) * plane + static_cast<std::size_t>(c);
      running += static_cast<double>(stopping[i]) * 1.5;
      if (kk < k::kTraceSegmentSlices) {
        EXPECT_EQ(wepl_far[i], static_cast<float>(running)) << "slice " << kk;
      }
      EXPECT_NEAR(wepl_far[i], running, 2e-7 * running) << "ray " << c << ", slice " << kk;
    }
  }
}

TEST(BeamKernels, TrilinearSampleIsZeroOutsideTheOuterFacesAndExactOnLinearData) {
  const int n[3] = {4, 3, 5};
  std::vector<float> v(4 * 3 * 5);
  for (int kk = 0; kk < 5; ++kk)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 4; ++i) v[static_cast<std::size_t>((kk * 3 + j) * 4 + i)] = static_cast<float>(1 + i + 2 * j + 3 * kk);
  EXPECT_FLOAT_EQ(k::sample_volume(v.data(), n, 1.25, 0.5, 2.75), static_cast<float>(1 + 1.25 + 2 * 0.5 + 3 * 2.75));
  EXPECT_FLOAT_EQ(k::sample_volume(v.data(), n, -0.4, 0.0, 0.0), 1.0f);  // inside the half-voxel border: edge value
  EXPECT_EQ(k::sample_volume(v.data(), n, -0.6, 0.0, 0.0), 0.0f);
  EXPECT_EQ(k::sample_volume(v.data(), n, 0.0, 2.6, 0.0), 0.0f);
}

// The trace samples stopping power and density at one point with shared
// voxels and weights (TrilinearPoint): each bitwise what a trilinear blend
// written out gives, inside, on the half-voxel border and outside; on grids
// with an axis of one voxel too (its two corners are the same voxel).
class TrilinearGrids : public ::testing::TestWithParam<std::array<int, 3>> {};

TEST_P(TrilinearGrids, TwoVolumesSampledAtOnePointEqualTheTrilinearBlendBitwise) {
  const std::array<int, 3> size = GetParam();
  const int n[3] = {size[0], size[1], size[2]};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(0.0f, 3.0f);
  std::vector<float> a(static_cast<std::size_t>(n[0] * n[1] * n[2])), b(a.size());
  for (float& x : a) x = value(rng);
  for (float& x : b) x = value(rng);
  // The blend written out, as sample_volume computed it before TrilinearPoint.
  const auto reference = [&](const std::vector<float>& v, double ci, double cj, double ck) {
    int i0, i1, j0, j1, k0, k1;
    double fi, fj, fk;
    if (!k::axis_lerp(ci, n[0], i0, i1, fi) || !k::axis_lerp(cj, n[1], j0, j1, fj) ||
        !k::axis_lerp(ck, n[2], k0, k1, fk))
      return 0.0f;
    const auto at = [&](int i, int j, int kk) { return static_cast<double>(v[static_cast<std::size_t>((kk * n[1] + j) * n[0] + i)]); };
    const double c00 = at(i0, j0, k0) * (1 - fi) + at(i1, j0, k0) * fi;
    const double c10 = at(i0, j1, k0) * (1 - fi) + at(i1, j1, k0) * fi;
    const double c01 = at(i0, j0, k1) * (1 - fi) + at(i1, j0, k1) * fi;
    const double c11 = at(i0, j1, k1) * (1 - fi) + at(i1, j1, k1) * fi;
    const double c0 = c00 * (1 - fj) + c10 * fj;
    const double c1 = c01 * (1 - fj) + c11 * fj;
    return static_cast<float>(c0 * (1 - fk) + c1 * fk);
  };
  std::uniform_real_distribution<double> ci(-1.0, n[0]), cj(-1.0, n[1]), ck(-1.0, n[2]);
  int inside = 0;
  for (int t = 0; t < 5000; ++t) {
    const double i = ci(rng), j = cj(rng), kk = ck(rng);
    const k::TrilinearPoint p(n, i, j, kk);
    ASSERT_EQ(p.of(a.data()), reference(a, i, j, kk)) << i << " " << j << " " << kk;
    ASSERT_EQ(p.of(b.data()), reference(b, i, j, kk)) << i << " " << j << " " << kk;
    ASSERT_EQ(k::sample_volume(a.data(), n, i, j, kk), p.of(a.data()));
    if (p.inside) ++inside;
  }
  EXPECT_GT(inside, 500);
}

INSTANTIATE_TEST_SUITE_P(Sizes, TrilinearGrids,
                         ::testing::Values(std::array<int, 3>{6, 4, 5}, std::array<int, 3>{1, 4, 5},
                                           std::array<int, 3>{6, 1, 5}, std::array<int, 3>{6, 4, 1},
                                           std::array<int, 3>{2, 2, 2}));

// The GPU's resampling works in float (sample_bev_index<float>: the
// fractional position, the weights and the blend); the CPU, the oracle, in
// double. The two agree to float rounding (positions below 8 px here: ulps
// of ~5·10⁻⁷ px, on values up to 2 that differ by up to 2 from pixel to
// pixel), both are 0 outside, and a wrong weight or neighbour would show.
TEST(BeamKernels, BevSampleInFloatIsTheDoubleOneToFloatRounding) {
  k::BevGeometry g{};
  g.cols = 7;
  g.rows = 5;
  g.slices = 6;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(0.0f, 2.0f);
  std::vector<float> bev(g.plane() * static_cast<std::size_t>(g.slices));
  for (float& v : bev) v = value(rng);
  std::uniform_real_distribution<double> col(-0.7, g.cols - 0.3), row(-0.7, g.rows - 0.3), slice(-0.7, g.slices - 0.3);
  int inside = 0;
  for (int t = 0; t < 20000; ++t) {
    const double c = col(rng), r = row(rng), s = slice(rng);
    const float d = k::sample_bev_index<double>(g, bev.data(), c, r, s);
    const float f = k::sample_bev_index<float>(g, bev.data(), c, r, s);
    if (d == 0.0f) {
      EXPECT_EQ(f, 0.0f) << c << " " << r << " " << s;
      continue;
    }
    ++inside;
    ASSERT_NEAR(f, d, 3e-6f) << c << " " << r << " " << s;
  }
  EXPECT_GT(inside, 10000);
}

// The GPU's resampling steps along a row of the dose grid in float
// (BevIndexLine); each index must be the one found per voxel in double (as
// sample_bev_at finds it) to float rounding of the index itself, on parallel
// and divergent axes, for steps along any direction of the beam frame.
TEST(BeamKernels, BevIndexLineStepsToThePerVoxelIndex) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> coord(-150.0, 150.0), step(-3.0, 3.0), sad(1500.0, 3000.0);
  int checked = 0;
  for (int t = 0; t < 4000; ++t) {
    k::BevGeometry g{};
    const bool divergent = t % 2 == 1;
    g.inv_sad_x = divergent ? 1.0 / sad(rng) : 0.0;
    g.inv_sad_y = divergent ? 1.0 / sad(rng) : 0.0;
    g.x0_mm = -97.5;
    g.y0_mm = -110.25;
    g.pitch_x_mm = 1.0;
    g.pitch_y_mm = 2.5;
    g.depth0_mm = -128.5;
    g.depth_step_mm = 1.5;
    g.inv_pitch_x_mm = 1.0 / g.pitch_x_mm;
    g.inv_pitch_y_mm = 1.0 / g.pitch_y_mm;
    g.inv_depth_step_mm = 1.0 / g.depth_step_mm;
    const double p[3] = {coord(rng), coord(rng), coord(rng)};
    const double dp[3] = {step(rng), step(rng), step(rng)};
    const k::BevIndexLine line(g, p, dp);
    const auto index = [&](int u, double out[3]) {
      const double x = p[0] + u * dp[0], y = p[1] + u * dp[1], d = p[2] + u * dp[2];
      out[0] = (x / g.magnification_x(d) - g.x0_mm) * g.inv_pitch_x_mm;
      out[1] = (y / g.magnification_y(d) - g.y0_mm) * g.inv_pitch_y_mm;
      out[2] = (d - g.depth0_mm) * g.inv_depth_step_mm;
    };
    double first[3];
    index(0, first);
    for (int u = 0; u < 8; ++u) {
      double exact[3];
      index(u, exact);
      float found[3];
      line.at(u, &found[0], &found[1], &found[2]);
      for (int a = 0; a < 3; ++a) {
        // Two float ulps of the larger of the index and the line's first
        // (rounded once, then stepped), and 1e-6 px for the step's rounding.
        const double magnitude = std::max({std::abs(exact[a]), std::abs(first[a]), 1.0});
        ASSERT_NEAR(found[a], exact[a], 2.0 * magnitude * 0x1p-23 + 1e-6) << "t " << t << " u " << u << " axis " << a;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 32000);
}

TEST(BeamKernels, IndexDivisorEqualsDivisionBelowTwoToThe31) {
  // Every divisor up to 4,100, powers of two and their neighbours, and the
  // largest; dividends at 0, around multiples of d, and at 2³¹ − 1.
  std::vector<unsigned> divisors;
  for (unsigned d = 1; d <= 4100; ++d) divisors.push_back(d);
  for (unsigned e = 12; e <= 30; ++e)
    for (unsigned d : {(1u << e) - 1, 1u << e, (1u << e) + 1}) divisors.push_back(d);
  divisors.push_back(2147483647u);
  std::mt19937 rng(7u);
  std::uniform_int_distribution<unsigned> any(0u, 2147483647u);
  long long checked = 0;
  for (unsigned d : divisors) {
    const k::IndexDivisor by(d);
    std::vector<unsigned> dividends{0u, 1u, d - 1, d, d + 1, 2147483647u, 2147483647u - d};
    for (int r = 0; r < 64; ++r) {
      const unsigned q = any(rng) / d;
      for (unsigned n : {q * d - 1, q * d, q * d + d - 1}) dividends.push_back(n);
      dividends.push_back(any(rng));
    }
    for (unsigned n : dividends) {
      if (n > 2147483647u) continue;  // q·d − 1 wrapped at q = 0
      ASSERT_EQ(by.quotient(n), n / d) << n << " / " << d;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(BeamKernels, VoxelIndexerSplitsAsTheNaiveArithmetic) {
  std::mt19937 rng(11u);
  const int grids[][3] = {{1, 1, 1}, {256, 256, 256}, {97, 131, 3}, {1, 500, 7}, {700, 1, 9}, {2000, 2000, 536}, {2000, 2000, 537}};  // the last two: just below and above 2³¹
  for (const auto& n : grids) {
    const k::VoxelIndexer voxels(n[0], n[1], n[2]);
    const std::size_t count = static_cast<std::size_t>(n[0]) * n[1] * n[2];
    EXPECT_EQ(voxels.small, count < (std::size_t{1} << 31)) << n[0] << " × " << n[1] << " × " << n[2];
    std::uniform_int_distribution<std::size_t> any(0, count - 1);
    for (int r = 0; r < 20000; ++r) {
      const std::size_t v = r < 2 ? (r == 0 ? 0 : count - 1) : any(rng);
      int i, j, kk;
      voxels.split(v, &i, &j, &kk);
      ASSERT_EQ(i, static_cast<int>(v % n[0]));
      ASSERT_EQ(j, static_cast<int>((v / n[0]) % n[1]));
      ASSERT_EQ(kk, static_cast<int>(v / (static_cast<std::size_t>(n[0]) * n[1])));
    }
  }
}

namespace {

/// One synthetic layer through a small heterogeneous trace: 9 × 7 rays of
/// 2 × 1 mm, 60 slices of 1 mm, material 1–1.2 g/cm³ by column, the layer's
/// in-air σx growing and σy shrinking with depth, so that a ray's widest σx
/// is at its end and its widest σy at its start, and σx sets the overshoot
/// of some rays and σy that of others; no fluence in column 4.
template <class Real>
struct SyntheticLayer {
  k::BevGeometry g{};
  std::vector<float> wepl_far, density, rho_over_x, step, image, sigma_x, sigma_y;
  std::vector<double> fluence;
  std::vector<k::CurveNode> nodes;
  std::vector<Real> energy, scattering, air_x, air_y;
  k::LayerStackArgs s{};
  k::LayerTables<Real> L{};

  explicit SyntheticLayer(const protondose::physics::CumulativeDepthDose& curve) {
    g.cols = 9;
    g.rows = 7;
    g.slices = 60;
    g.pitch_x_mm = 2.0;
    g.pitch_y_mm = 1.0;
    g.depth0_mm = 0.5;
    g.depth_step_mm = 1.0;
    g.inv_pitch_x_mm = 0.5;
    g.inv_pitch_y_mm = 1.0;
    g.inv_depth_step_mm = 1.0;
    const std::size_t plane = g.plane(), n = plane * static_cast<std::size_t>(g.slices);
    wepl_far.resize(n);
    density.resize(n);
    rho_over_x.resize(n);
    for (int kk = 0; kk < g.slices; ++kk)
      for (std::size_t r = 0; r < plane; ++r) {
        const float rho = 1.0f + 0.1f * static_cast<float>((r % g.cols) % 3);
        wepl_far[kk * plane + r] = rho * static_cast<float>(kk + 1);
        density[kk * plane + r] = rho;
        rho_over_x[kk * plane + r] = rho / 36.08f;
      }
    step.assign(plane, 1.0f);
    image.assign(n, -1.0f);
    sigma_x.assign(n, -1.0f);
    sigma_y.assign(n, -1.0f);
    fluence.resize(plane);
    for (std::size_t r = 0; r < plane; ++r) fluence[r] = r % g.cols == 4 ? 0.0 : 1.0e6 * (1 + r % 5);
    nodes = curve_nodes_of(curve);
    for (int i = 0; i < 400; ++i) {  // 0.5 mm nodes
      energy.push_back(static_cast<Real>(std::max(150.0 - 0.55 * 0.5 * i, 0.0)));
      scattering.push_back(static_cast<Real>(2.0e-6 * (1 + 0.01 * i)));
    }
    for (int kk = 0; kk < g.slices; ++kk) {
      air_x.push_back(static_cast<Real>(3.0 + 0.1 * kk));
      air_y.push_back(static_cast<Real>(5.0 - 0.04 * kk));
    }
    s.grid = g;
    s.wepl_far_mm = wepl_far.data();
    s.density_g_cm3 = density.data();
    s.rho_over_x = rho_over_x.data();
    s.step_mm = step.data();
    s.image = image.data();
    s.sigma_x_px = sigma_x.data();
    s.sigma_y_px = sigma_y.data();
    s.dose_to_water = true;
    s.cutoff_sigmas = 3.0f;
    s.spot_cutoff_sigmas = 3.0;
    L.curve_inv_uniform_step_mm = curve.uniform_step_mm() > 0 ? 1.0 / curve.uniform_step_mm() : 0.0;
    L.inv_wepl_step_mm = 2.0;
    L.spread_sigma_x_iso_mm = 2.0;
    L.spread_sigma_y_iso_mm = 2.5;
    L.cutoff_wepl_mm = 50.0;  // rays stop at slices 41–50
    L.slices = g.slices;
    L.stack_offset = 0;
    L.fluence = fluence.data();
    L.curve = nodes.data();
    L.curve_nodes = k::curve_node_count(nodes);
    L.energy_mev = energy.data();
    L.scattering_factor = scattering.data();
    L.wepl_nodes = static_cast<int>(energy.size());
    L.air_sigma_x_mm = air_x.data();
    L.air_sigma_y_mm = air_y.data();
  }
};

/// layer_ray's overshoot against its definition: the largest, over the
/// pixels the ray computes, of how far that pixel's kernel reaches past the
/// grid edge.
template <class Real>
void expect_overshoot_of_the_widest_pixel(const protondose::physics::CumulativeDepthDose& curve) {
  SyntheticLayer<Real> layer(curve);
  const k::BevGeometry& g = layer.g;
  int positive = 0, rays_with_pixels = 0, set_by_x = 0, set_by_y = 0;
  for (int row = 0; row < g.rows; ++row)
    for (int col = 0; col < g.cols; ++col) {
      int expected = INT_MIN, by_x = INT_MIN, by_y = INT_MIN, pixels = 0;
      int calls = 0;
      const auto observe = [&](int, float image, float sx, float sy) {
        ++calls;  // every slice, zeros where the ray computes no pixel
        if (image <= 0.0f) return;  // in this case every computed pixel carries dose
        const int rx = protondose::gaussian_radius_px(sx, layer.s.cutoff_sigmas);
        const int ry = protondose::gaussian_radius_px(sy, layer.s.cutoff_sigmas);
        by_x = std::max({by_x, rx - col, col + rx - (g.cols - 1)});
        by_y = std::max({by_y, ry - row, row + ry - (g.rows - 1)});
        expected = std::max(by_x, by_y);
        ++pixels;
      };
      int overshoot = INT_MIN;
      float halo_variance = 0;
      k::layer_ray(layer.s, layer.L, col, row, &overshoot, &halo_variance, observe);
      ASSERT_EQ(overshoot, expected) << "ray (" << col << ", " << row << ")";
      ASSERT_EQ(calls, layer.L.slices) << "ray (" << col << ", " << row << ")";
      if (pixels > 0) ++rays_with_pixels;
      if (overshoot > 0) ++positive;
      if (pixels > 0 && by_x > by_y) ++set_by_x;
      if (pixels > 0 && by_y > by_x) ++set_by_y;
    }
  // The case's premises: most rays compute pixels, many reach past the edge,
  // and either axis sets the overshoot of some of them.
  EXPECT_EQ(rays_with_pixels, 7 * 8) << "every ray but the 7 without fluence computes pixels";
  EXPECT_GT(positive, 10);
  EXPECT_GE(set_by_x, 3);
  EXPECT_GE(set_by_y, 3);
}

}  // namespace

TEST(BeamKernels, LayerRayOvershootIsThatOfItsWidestPixels) {
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  const protondose::physics::CumulativeDepthDose curve = machine.depth_dose(150.0);
  expect_overshoot_of_the_widest_pixel<double>(curve);
  expect_overshoot_of_the_widest_pixel<float>(curve);
}

// The GPU's layer kernel runs layer_ray with 32-bit trace and stack indices
// where they fit; the same ray with 64-bit ones must write the same pixels,
// bitwise, with the trace and the layer's stack slices offset (both indices
// then differ from the slice number).
TEST(BeamKernels, LayerRayWith32BitIndicesEqualsTheSizeTOneBitwise) {
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  const protondose::physics::CumulativeDepthDose curve = machine.depth_dose(150.0);
  SyntheticLayer<float> wide(curve), narrow(curve);
  for (SyntheticLayer<float>* layer : {&wide, &narrow}) {
    layer->s.trace_first_slice = 2;
    layer->L.slices = 50;
    layer->L.stack_offset = 7;
  }
  const k::BevGeometry& g = wide.g;
  for (int row = 0; row < g.rows; ++row)
    for (int col = 0; col < g.cols; ++col) {
      int overshoot_wide = INT_MIN, overshoot_narrow = INT_MIN;
      float halo_wide = 0, halo_narrow = 0;
      const double e_wide = k::layer_ray<float, k::NoPixelObserver, std::size_t>(wide.s, wide.L, col, row,
                                                                                 &overshoot_wide, &halo_wide);
      const double e_narrow = k::layer_ray<float, k::NoPixelObserver, unsigned>(narrow.s, narrow.L, col, row,
                                                                                &overshoot_narrow, &halo_narrow);
      ASSERT_EQ(e_wide, e_narrow) << "ray (" << col << ", " << row << ")";
      ASSERT_EQ(overshoot_wide, overshoot_narrow);
    }
  std::size_t written = 0;
  for (std::size_t i = 0; i < wide.image.size(); ++i) {
    ASSERT_EQ(wide.image[i], narrow.image[i]) << "pixel " << i;
    ASSERT_EQ(wide.sigma_x[i], narrow.sigma_x[i]) << "pixel " << i;
    ASSERT_EQ(wide.sigma_y[i], narrow.sigma_y[i]) << "pixel " << i;
    if (wide.image[i] > 0) ++written;
  }
  // Slices 7 … 56 of the stack hold the layer; the rest stay untouched (−1).
  const std::size_t plane = g.plane();
  EXPECT_GT(written, 40 * (plane - 7));
  EXPECT_EQ(wide.image[6 * plane], -1.0f);
  EXPECT_EQ(wide.image[57 * plane], -1.0f);
  EXPECT_NE(wide.image[7 * plane], -1.0f);
}

// The GPU's layer kernel sums the halo over groups of b columns (b divides the
// halo grid's nominal factor), so the factor must stay a multiple of b
// whatever the radius rule asks.
TEST(BeamKernels, HaloColumnBinTilesTheNominalFactorAndTheFactorIsAMultipleOfIt) {
  const int expected_bin[][2] = {{1, 1}, {2, 2}, {3, 1}, {4, 4}, {5, 1}, {6, 2}, {8, 8}, {12, 4}, {16, 8}, {24, 8}};
  for (const auto& c : expected_bin) EXPECT_EQ(k::halo_column_bin(c[0]), c[1]) << "nominal factor " << c[0];
  EXPECT_EQ(k::halo_factor(8, 5, 8), 8);   // the water cube: 8 mm halo pixels over 1 mm rays
  EXPECT_EQ(k::halo_factor(8, 9, 8), 16);  // the radius rule, rounded up to whole column sums
  EXPECT_EQ(k::halo_factor(3, 5, 1), 5);
  EXPECT_EQ(k::halo_factor(4, 6, 4), 8);
  for (int nominal = 1; nominal <= 40; ++nominal)
    for (int radius = 0; radius <= 40; ++radius) {
      const int b = k::halo_column_bin(nominal);
      const int f = k::halo_factor(nominal, radius, b);
      ASSERT_EQ(nominal % b, 0);
      ASSERT_EQ(f % b, 0) << nominal << ", " << radius;
      ASSERT_GE(f, std::max(nominal, radius));
      ASSERT_LT(f, std::max(nominal, radius) + b);
    }
}

namespace {

/// Coarse pixels of a halo grid before and after the fine grid's blocks: the
/// engine pads each side by what the dose grid can read (halo_pads).
struct HaloPads {
  int cols_before, rows_before, cols_after, rows_after;
};
constexpr HaloPads kHaloPadCases[] = {{0, 0, 0, 0}, {2, 2, 2, 2}, {3, 1, 0, 2}};

k::HaloBinning halo_binning(int f, const HaloPads& pads, int fine_cols, int fine_rows, int column_bin) {
  return k::HaloBinning{f,
                        pads.cols_before,
                        pads.rows_before,
                        fine_cols,
                        fine_rows,
                        (fine_cols + f - 1) / f + pads.cols_before + pads.cols_after,
                        (fine_rows + f - 1) / f + pads.rows_before + pads.rows_after,
                        column_bin};
}

std::string pads_name(const HaloPads& p) {
  return "pads " + std::to_string(p.cols_before) + "/" + std::to_string(p.rows_before) + " before, " +
         std::to_string(p.cols_after) + "/" + std::to_string(p.rows_after) + " after";
}

/// A random box of a fine slice of fine_cols × fine_rows: ordered ends but
/// on every sixth trial, whose columns are inverted (or empty).
protondose::SliceBox random_fine_box(std::mt19937& rng, int trial, int fine_cols, int fine_rows) {
  std::uniform_int_distribution<int> col(0, fine_cols), row(0, fine_rows);
  const int c0 = col(rng), c1 = col(rng), r0 = row(rng), r1 = row(rng);
  const bool ordered = trial % 6 != 0;
  protondose::SliceBox fine;
  fine.col_begin = ordered ? std::min(c0, c1) : std::max(c0, c1);
  fine.col_end = ordered ? std::max(c0, c1) : std::min(c0, c1);
  fine.row_begin = std::min(r0, r1);
  fine.row_end = std::max(r0, r1);
  return fine;
}

/// One case of the halo-box tests: a fine slice of 41 × 29 px binned by b
/// (grid factor f, pads), a random box of it, and column sums of zeros, one
/// per fine row and bin (bins_per_row a row).
struct HaloBoxCase {
  static constexpr int kFineCols = 41, kFineRows = 29;
  int b = 0, f = 0;
  const HaloPads* pads = nullptr;
  k::HaloBinning h;
  protondose::SliceBox fine;
  int bins_per_row = 0;
  std::vector<double> sum, weighted;
  std::size_t bin(int row, int j) const { return static_cast<std::size_t>(row) * bins_per_row + j; }
  std::string where(int cr, int cc) const {
    return "bin " + std::to_string(b) + ", f " + std::to_string(f) + ", " + pads_name(*pads) + ", fine box cols [" +
           std::to_string(fine.col_begin) + ", " + std::to_string(fine.col_end) + ") rows [" +
           std::to_string(fine.row_begin) + ", " + std::to_string(fine.row_end) + "), coarse (" + std::to_string(cr) +
           ", " + std::to_string(cc) + ")";
  }
};

/// Calls body(HaloBoxCase&) for bins of 1, 4 and 8, grid factors of one and
/// two bins, every pad case, and 12 random boxes each (random_fine_box).
template <class Body>
void for_each_halo_box_case(std::mt19937& rng, Body&& body) {
  for (int b : {1, 4, 8})
    for (int multiple : {1, 2})
      for (const HaloPads& pads : kHaloPadCases)
        for (int trial = 0; trial < 12; ++trial) {
          HaloBoxCase c;
          c.b = b;
          c.f = b * multiple;
          c.pads = &pads;
          c.h = halo_binning(c.f, pads, HaloBoxCase::kFineCols, HaloBoxCase::kFineRows, b);
          c.fine = random_fine_box(rng, trial, HaloBoxCase::kFineCols, HaloBoxCase::kFineRows);
          c.bins_per_row = (HaloBoxCase::kFineCols + b - 1) / b;
          c.sum.assign(static_cast<std::size_t>(c.bins_per_row) * HaloBoxCase::kFineRows, 0.0);
          c.weighted.assign(c.sum.size(), 0.0);
          body(c);
        }
}

}  // namespace

// halo_bin_pixel_from_column_bins (the GPU's binning) against halo_bin_pixel
// (the CPU's) on random shares — zeros and negative ones among them, which
// both leave out — for every column bin, factors of 1–3 bins, rows whose
// width is not a multiple of the bin, and padded grids (unequal pads too).
TEST(BeamKernels, HaloBinFromColumnSumsEqualsThePixelBinning) {
  std::mt19937 rng(5u);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int compared = 0, non_zero = 0;
  for (int fine_cols : {13, 16, 37})
    for (int b : {1, 2, 4, 8})
      for (int multiple : {1, 2, 3})
        for (const HaloPads& pads : kHaloPadCases) {
          const int fine_rows = 11, f = b * multiple;
          std::vector<float> share(static_cast<std::size_t>(fine_cols) * fine_rows), variance(share.size());
          for (std::size_t i = 0; i < share.size(); ++i) {
            const float u = unit(rng);
            share[i] = u < 0.3f ? 0.0f : (u < 0.35f ? -u : 10.0f * u);
            variance[i] = 10.0f + 2500.0f * unit(rng);
          }
          // Column sums as ColumnBinnedHaloStore forms them (shares ≤ 0 left out).
          const int bins_per_row = (fine_cols + b - 1) / b;
          std::vector<double> sum(static_cast<std::size_t>(bins_per_row) * fine_rows, 0.0), weighted(sum.size(), 0.0);
          for (int r = 0; r < fine_rows; ++r)
            for (int c = 0; c < fine_cols; ++c) {
              const std::size_t p = static_cast<std::size_t>(r) * fine_cols + c;
              if (share[p] <= 0) continue;
              const std::size_t q = static_cast<std::size_t>(r) * bins_per_row + c / b;
              sum[q] += share[p];
              weighted[q] += static_cast<double>(share[p]) * variance[p];
            }
          const k::HaloBinning h = halo_binning(f, pads, fine_cols, fine_rows, b);
          for (int cr = 0; cr < h.rows; ++cr)
            for (int cc = 0; cc < h.cols; ++cc) {
              float image, sx, sy, image_bins, sx_bins, sy_bins;
              k::halo_bin_pixel(h, share.data(), variance.data(), cr, cc, 8.0, 6.0, &image, &sx, &sy);
              k::halo_bin_pixel_from_column_bins(h, sum.data(), weighted.data(), cr, cc, 8.0, 6.0,
                                                 &image_bins, &sx_bins, &sy_bins);
              const auto where = [&] {
                return "cols " + std::to_string(fine_cols) + ", bin " + std::to_string(b) + ", f " +
                       std::to_string(f) + ", " + pads_name(pads) + ", coarse (" + std::to_string(cr) +
                       ", " + std::to_string(cc) + ")";
              };
              ASSERT_NEAR(image_bins, image, 2e-6 * std::abs(image)) << where();
              ASSERT_NEAR(sx_bins, sx, 2e-6 * std::abs(sx)) << where();
              ASSERT_NEAR(sy_bins, sy, 2e-6 * std::abs(sy)) << where();
              ++compared;
              if (image > 0) ++non_zero;
            }
        }
  EXPECT_GT(non_zero, compared / 3);  // the pad holds a third or so of the coarse pixels
}

// coarse_slice_box: the halo binning of a fine slice whose shares are zero
// outside its box is zero outside the coarse box (the GPU then writes those
// zeros without reading), and not zero anywhere inside it (the box is no
// larger than the binning needs); an empty box stays empty.
TEST(BeamKernels, CoarseSliceBoxHoldsExactlyTheCoarsePixelsThatBinShares) {
  std::mt19937 rng(13u);
  int boxes = 0;
  for_each_halo_box_case(rng, [&](HaloBoxCase& c) {
    const protondose::SliceBox& fine = c.fine;
    // Column sums of shares > 0 on every fine pixel of the box, 0 elsewhere.
    for (int r = fine.row_begin; r < fine.row_end; ++r)
      for (int col = fine.col_begin; col < fine.col_end; ++col) {
        c.sum[c.bin(r, col / c.b)] += 1.0;
        c.weighted[c.bin(r, col / c.b)] += 40.0;
      }
    const protondose::SliceBox coarse = k::coarse_slice_box(fine, c.h);
    const bool empty = fine.col_begin >= fine.col_end || fine.row_begin >= fine.row_end;
    if (empty) {
      EXPECT_TRUE(coarse.col_begin >= coarse.col_end || coarse.row_begin >= coarse.row_end);
      return;
    }
    ++boxes;
    for (int cr = 0; cr < c.h.rows; ++cr)
      for (int cc = 0; cc < c.h.cols; ++cc) {
        float image, sx, sy;
        k::halo_bin_pixel_from_column_bins(c.h, c.sum.data(), c.weighted.data(), cr, cc, 8.0, 6.0, &image, &sx, &sy);
        const bool inside =
            cc >= coarse.col_begin && cc < coarse.col_end && cr >= coarse.row_begin && cr < coarse.row_end;
        ASSERT_EQ(inside, image > 0.0f) << c.where(cr, cc);
        if (!inside) {
          EXPECT_EQ(sx, 0.0f);
          EXPECT_EQ(sy, 0.0f);
        }
      }
  });
  EXPECT_GT(boxes, 135);
}

// With the fine slice's box, halo_bin_pixel_from_column_bins reads no column
// sum that does not reach into it (the GPU's layer kernel writes none):
// NaN there gives bitwise the binning of zeros there, for boxes of every
// shape, empty and inverted ones included (all NaN: all zero).
TEST(BeamKernels, HaloBinFromColumnSumsReadsNoSumOutsideTheFineBox) {
  std::mt19937 rng(17u);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int non_zero = 0;
  for_each_halo_box_case(rng, [&](HaloBoxCase& c) {
    const protondose::SliceBox& fine = c.fine;
    // Random sums on the bins that reach into the box; 0 (as written) or
    // NaN (unwritten) on the others.
    std::vector<double> sum_unwritten(c.sum.size(), nan), weighted_unwritten(c.sum.size(), nan);
    for (int r = fine.row_begin; r < fine.row_end; ++r)
      for (int j = 0; j < c.bins_per_row; ++j) {
        if (!(j * c.b < fine.col_end && j * c.b + c.b > fine.col_begin)) continue;
        const std::size_t q = c.bin(r, j);
        c.sum[q] = sum_unwritten[q] = unit(rng) < 0.2 ? 0.0 : unit(rng);
        c.weighted[q] = weighted_unwritten[q] = c.sum[q] * (10.0 + 2500.0 * unit(rng));
      }
    for (int cr = 0; cr < c.h.rows; ++cr)
      for (int cc = 0; cc < c.h.cols; ++cc) {
        float image, sx, sy, image_boxed, sx_boxed, sy_boxed;
        k::halo_bin_pixel_from_column_bins(c.h, c.sum.data(), c.weighted.data(), cr, cc, 8.0, 6.0, &image, &sx, &sy);
        k::halo_bin_pixel_from_column_bins(c.h, sum_unwritten.data(), weighted_unwritten.data(), cr, cc, 8.0, 6.0,
                                           &image_boxed, &sx_boxed, &sy_boxed, &fine);
        ASSERT_EQ(image_boxed, image) << c.where(cr, cc);
        ASSERT_EQ(sx_boxed, sx) << c.where(cr, cc);
        ASSERT_EQ(sy_boxed, sy) << c.where(cr, cc);
        if (image > 0) ++non_zero;
      }
  });
  EXPECT_GT(non_zero, 1000);
}

// Where every share has the same variance (water, a parallel beam), the
// coarse pixels' σ must be bitwise that of the pixel binning, or the halo
// slice stops being uniform and loses its separable passes.
TEST(BeamKernels, HaloBinFromColumnSumsKeepsAUniformVarianceBitwise) {
  std::mt19937 rng(9u);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int compared = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int fine_cols = 37, fine_rows = 19, b = 8, f = 8, pad = 1;
    const float v = 10.0f + 2500.0f * unit(rng);
    std::vector<float> share(static_cast<std::size_t>(fine_cols) * fine_rows), variance(share.size(), v);
    for (float& s : share) s = unit(rng) < 0.1f ? 0.0f : std::exp(-12.0f * unit(rng));  // shares over 5 decades
    const int bins_per_row = (fine_cols + b - 1) / b;
    std::vector<double> sum(static_cast<std::size_t>(bins_per_row) * fine_rows, 0.0), weighted(sum.size(), 0.0);
    // The warp's tree order: pairs, then pairs of pairs.
    for (int r = 0; r < fine_rows; ++r)
      for (int j = 0; j < bins_per_row; ++j) {
        double lane_v[8], lane_w[8];
        for (int l = 0; l < 8; ++l) {
          const int c = j * b + l;
          const float s = c < fine_cols ? share[static_cast<std::size_t>(r) * fine_cols + c] : 0.0f;
          lane_v[l] = s <= 0 ? 0.0 : s;
          lane_w[l] = lane_v[l] * v;
        }
        for (int offset = 4; offset > 0; offset /= 2)
          for (int l = 0; l < offset; ++l) {
            lane_v[l] += lane_v[l + offset];
            lane_w[l] += lane_w[l + offset];
          }
        sum[static_cast<std::size_t>(r) * bins_per_row + j] = lane_v[0];
        weighted[static_cast<std::size_t>(r) * bins_per_row + j] = lane_w[0];
      }
    const k::HaloBinning h{f, pad, pad, fine_cols, fine_rows, (fine_cols + f - 1) / f + 2 * pad,
                           (fine_rows + f - 1) / f + 2 * pad, b};
    for (int cr = pad; cr < h.rows - pad; ++cr)
      for (int cc = pad; cc < h.cols - pad; ++cc) {
        float image, sx, sy, image_bins, sx_bins, sy_bins;
        k::halo_bin_pixel(h, share.data(), variance.data(), cr, cc, 8.0, 8.0, &image, &sx, &sy);
        k::halo_bin_pixel_from_column_bins(h, sum.data(), weighted.data(), cr, cc, 8.0, 8.0, &image_bins,
                                           &sx_bins, &sy_bins);
        ASSERT_EQ(sx_bins, sx) << "trial " << trial << ", coarse (" << cr << ", " << cc << ")";
        ASSERT_EQ(sy_bins, sy);
        ++compared;
      }
  }
  EXPECT_GT(compared, 1000);
}

// layer_ray's contract with its halo store: one call per slice of the layer,
// in order, for every ray — rays without protons, rays past their cut-off and
// rays off the grid included (the GPU's store sums over a warp's lanes) —
// with the values the default store writes to the stack.
TEST(BeamKernels, LayerRayCallsItsHaloStoreOncePerSliceWithThePixelsItStores) {
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  SyntheticLayer<float> layer(machine.depth_dose(150.0));
  const k::BevGeometry& g = layer.g;
  std::vector<float> halo_weight, halo_sigma;
  for (std::size_t i = 0; i < layer.energy.size(); ++i) {
    halo_weight.push_back(0.05f + 0.0002f * static_cast<float>(i));
    halo_sigma.push_back(6.0f + 0.05f * static_cast<float>(i));
  }
  layer.L.halo_weight = halo_weight.data();
  layer.L.halo_sigma_mm = halo_sigma.data();
  layer.L.halo_max_wepl_mm = 150.0;
  layer.L.stack_offset = 3;
  layer.L.slices = 55;
  const std::size_t plane = g.plane();
  std::vector<float> stack(plane * 58, 0.0f);
  layer.image = layer.sigma_x = layer.sigma_y = stack;
  layer.s.image = layer.image.data();
  layer.s.sigma_x_px = layer.sigma_x.data();
  layer.s.sigma_y_px = layer.sigma_y.data();
  std::vector<float> halo_image(stack.size(), -1.0f), halo_variance(stack.size(), -1.0f);
  layer.s.halo_image = halo_image.data();
  layer.s.halo_variance_mm2 = halo_variance.data();

  struct Call {
    int slice;
    std::size_t stack_index;
    bool on_grid;
    float share, variance;
  };
  struct RecordingStore {
    std::vector<Call>* calls;
    void operator()(const k::LayerStackArgs&, int slice, std::size_t i, bool on_grid, float share, float v) const {
      calls->push_back({slice, i, on_grid, share, v});
    }
  };
  int positive_shares = 0;
  for (int row = -1; row <= g.rows; ++row)
    for (int col = -1; col <= g.cols; ++col) {
      const bool on_grid = row >= 0 && row < g.rows && col >= 0 && col < g.cols;
      std::vector<Call> calls;
      int overshoot = INT_MIN;
      float max_variance = 0;
      const double recorded = k::layer_ray<float, k::NoPixelObserver, std::size_t, RecordingStore>(
          layer.s, layer.L, col, row, &overshoot, &max_variance, k::NoPixelObserver{}, RecordingStore{&calls});
      ASSERT_EQ(calls.size(), 55u) << "ray (" << col << ", " << row << ")";
      if (!on_grid) {
        EXPECT_EQ(recorded, 0.0);
        EXPECT_EQ(overshoot, INT_MIN);
        for (const Call& c : calls) ASSERT_TRUE(!c.on_grid && c.share == 0.0f && c.variance == 0.0f);
        continue;
      }
      int overshoot_stored = INT_MIN;
      float max_variance_stored = 0;
      const double stored = k::layer_ray(layer.s, layer.L, col, row, &overshoot_stored, &max_variance_stored);
      EXPECT_EQ(recorded, stored);
      EXPECT_EQ(max_variance, max_variance_stored);
      const std::size_t ray = static_cast<std::size_t>(row) * g.cols + col;
      for (int kk = 0; kk < 55; ++kk) {
        const Call& c = calls[static_cast<std::size_t>(kk)];
        const std::size_t i = (3 + static_cast<std::size_t>(kk)) * plane + ray;
        ASSERT_EQ(c.slice, kk);
        ASSERT_EQ(c.stack_index, i);
        ASSERT_TRUE(c.on_grid);
        ASSERT_EQ(c.share, halo_image[i]) << "ray (" << col << ", " << row << "), slice " << kk;
        ASSERT_EQ(c.variance, halo_variance[i]);
        if (c.share > 0) ++positive_shares;
      }
    }
  // Off-grid rays wrote nothing: the stack slices before the layer's (0–2) stay as they were.
  EXPECT_EQ(halo_image[0], -1.0f);
  EXPECT_EQ(halo_image[3 * plane - 1], -1.0f);
  EXPECT_NE(halo_image[3 * plane], -1.0f);
  // The case's premise: most on-grid pixels before the cut-off carry a halo share.
  EXPECT_GT(positive_shares, 40 * static_cast<int>(plane - g.rows));
}
