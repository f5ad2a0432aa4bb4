// The host/device arithmetic of engine/src/beam_kernels.h against the
// functions it re-implements for the GPU (physics' CIDD lookup, a linear scan
// for the cut-off search): the CPU backend runs these same functions, so a
// slip here would move both backends together and only these tests see it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "beam_kernels.h"
#include "protondose/physics/beam_model.h"

namespace k = protondose::engine::kernels;

TEST(BeamKernels, CiddLookupEqualsThePhysicsCurveWithAndWithoutTheUniformShortcutAndTables) {
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  int uniform_curves = 0;
  for (double e : {70.0, 118.0, 150.0, 226.0}) {
    const protondose::physics::CumulativeDepthDose c = machine.depth_dose(e);
    if (c.uniform_step_mm() > 0) ++uniform_curves;
    const std::vector<double>& d = c.depth_mm();
    const int n = static_cast<int>(d.size());
    std::vector<double> slope(static_cast<std::size_t>(n - 1));
    k::idd_slopes(d.data(), c.idd_nodes_mev_cm2_g().data(), n, slope.data());
    const double inv_step = c.uniform_step_mm() > 0 ? 1.0 / c.uniform_step_mm() : 0.0;
    for (double w = -1.0; w <= c.end_depth_mm() + 2.0; w += 0.0173) {
      const double expected = c.cidd_mev(w);
      const double searched = k::cidd_mev(d.data(), c.idd_nodes_mev_cm2_g().data(), c.cidd_nodes_mev().data(), n, 0.0, w);
      const double divided = k::cidd_mev(d.data(), c.idd_nodes_mev_cm2_g().data(), c.cidd_nodes_mev().data(), n,
                                         c.uniform_step_mm(), w);
      ASSERT_NEAR(searched, expected, 1e-12 * c.total_energy_mev()) << e << " MeV, " << w << " mm";
      ASSERT_NEAR(divided, expected, 1e-12 * c.total_energy_mev()) << e << " MeV, " << w << " mm";
      // The layer kernel's form: the inverse step and the slope table, no division.
      const double tabled = k::cidd_mev(d.data(), c.idd_nodes_mev_cm2_g().data(), c.cidd_nodes_mev().data(), n,
                                        c.uniform_step_mm(), w, inv_step, slope.data());
      ASSERT_NEAR(tabled, expected, 1e-12 * c.total_energy_mev()) << e << " MeV, " << w << " mm";
    }
  }
  EXPECT_GT(uniform_curves, 0) << "no curve exercised the equally-spaced shortcut";
}

TEST(BeamKernels, CiddLookupWalkedAlongARayEqualsTheBisectionBitwise) {
  // The layer kernel carries the curve segment from face to face of a ray
  // (the WEPL never decreases); what it finds must be what the bisection
  // finds, bit for bit, or the CPU oracle and the GPU would drift apart from
  // a bisecting reference. Interpolated energies: unequally spaced nodes,
  // some closer than 0.01 mm, so a 1 mm step crosses several at once.
  const protondose::physics::BeamModel machine = protondose::physics::load_machine("DCPT_ProBeam_v5");
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> step_mm(0.0, 3.0);
  int walked_curves = 0;
  for (double e : {118.12, 141.3, 172.51}) {
    const protondose::physics::CumulativeDepthDose c = machine.depth_dose(e);
    if (c.uniform_step_mm() > 0) continue;  // the walk is for unequally spaced nodes
    ++walked_curves;
    const std::vector<double>& d = c.depth_mm();
    const int n = static_cast<int>(d.size());
    std::vector<double> slope(static_cast<std::size_t>(n - 1));
    k::idd_slopes(d.data(), c.idd_nodes_mev_cm2_g().data(), n, slope.data());
    const auto lookup = [&](double w, int* segment) {
      return k::cidd_mev(d.data(), c.idd_nodes_mev_cm2_g().data(), c.cidd_nodes_mev().data(), n, 0.0, w, 0.0,
                         slope.data(), segment);
    };
    for (int ray = 0; ray < 50; ++ray) {
      int segment = 0;
      // Steps of 0–3 mm, a repeated depth, a jump over many nodes, past the end.
      for (double w = -0.5; w < c.end_depth_mm() + 5.0; w += (ray % 10 == 0 ? 17.0 : step_mm(rng))) {
        ASSERT_EQ(lookup(w, &segment), lookup(w, nullptr)) << e << " MeV, ray " << ray << ", " << w << " mm";
        ASSERT_EQ(lookup(w, &segment), lookup(w, nullptr)) << "the same depth twice, " << w << " mm";
      }
    }
    // A depth before the carried segment (not along a ray): bisected again.
    int segment = 0;
    lookup(0.8 * c.end_depth_mm(), &segment);
    EXPECT_GT(segment, 0);
    EXPECT_EQ(lookup(0.1 * c.end_depth_mm(), &segment), lookup(0.1 * c.end_depth_mm(), nullptr));
    EXPECT_EQ(segment, k::segment_from(d.data(), n, 0.1 * c.end_depth_mm(), 0));
  }
  EXPECT_GT(walked_curves, 0) << "no curve with unequally spaced nodes";
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
