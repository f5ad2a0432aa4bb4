#include "protondose/engine/ray_trace.h"

#include <gtest/gtest.h>

#include <cmath>

#include "protondose/core/error.h"

namespace pe = protondose::engine;
using protondose::Grid3;
using protondose::Volume;

namespace {

/// 2 mm CT, 61³ voxels centred on the origin; a slab of `rsp` between patient
/// y ∈ [y0, y1] mm (voxel faces), empty elsewhere.
void slab_ct(double y0, double y1, float rsp, Volume<float>& rsp_v, Volume<float>& rho_v) {
  Grid3 g;
  g.size = {61, 61, 61};
  g.spacing_mm = {2, 2, 2};
  g.origin_mm = {-60, -60, -60};
  rsp_v = Volume<float>(g, 0.0f);
  rho_v = Volume<float>(g, 0.0f);
  for (int k = 0; k < 61; ++k)
    for (int j = 0; j < 61; ++j)
      for (int i = 0; i < 61; ++i) {
        const double y = g.position_mm(i, j, k)[1];
        if (y > y0 && y < y1) {
          rsp_v.at(i, j, k) = rsp;
          rho_v.at(i, j, k) = rsp;
        }
      }
}

pe::BevGrid grid_through_ct(double sad_mm) {
  pe::BevGridSpec s;
  s.spot_min_x_mm = -20;
  s.spot_max_x_mm = 20;
  s.spot_min_y_mm = -20;
  s.spot_max_y_mm = 20;
  s.pitch_x_mm = 2;
  s.pitch_y_mm = 2;
  s.sad_x_mm = sad_mm;
  s.sad_y_mm = sad_mm;
  s.depth_begin_mm = -80;
  s.depth_end_mm = 80;
  s.depth_step_mm = 0.5;
  return pe::make_bev_grid(s);
}

}  // namespace

TEST(RayTrace, WeplThroughASlabIsItsThicknessTimesRspOnTheAxis) {
  Volume<float> rsp, rho;
  slab_ct(-21, 19, 1.5f, rsp, rho);  // 40 mm thick (between voxel centres −20 … 18 → faces −21 … 19)
  const pe::BevGrid g = grid_through_ct(pe::kParallelSadMm);
  const pe::BeamFrame f(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs);
  const pe::RayTrace t = pe::trace_rays(g, f, rsp, rho, 2);
  const int c = 10, r = 10;  // the central ray (x = y = 0)
  ASSERT_DOUBLE_EQ(g.iso_x_mm(c), 0.0);
  const float total = t.wepl_far_mm[g.index(g.slices - 1, r, c)];
  // Trilinear sampling of a 2 mm step edge smears ±1 mm but keeps the integral.
  EXPECT_NEAR(total, 40 * 1.5, 0.1);
  // Entry into the patient: the first sample with density ≥ threshold is ~1 mm before the face at −21 mm.
  ASSERT_GE(t.entry_slice[static_cast<std::size_t>(r) * g.cols + c], 0);
  const double entry_depth = g.depth_mm(t.entry_slice[static_cast<std::size_t>(r) * g.cols + c]);
  EXPECT_NEAR(entry_depth, -21.5, 1.0);
  // WEPL before the slab is 0 and grows monotonically.
  EXPECT_FLOAT_EQ(t.wepl_far_mm[g.index(0, r, c)], 0.0f);
  for (int k = 1; k < g.slices; ++k) EXPECT_GE(t.wepl_far_mm[g.index(k, r, c)], t.wepl_far_mm[g.index(k - 1, r, c)]);
}

TEST(RayTrace, DivergentOffAxisRayCrossesTheSlabObliquely) {
  Volume<float> rsp, rho;
  slab_ct(-21, 19, 1.0f, rsp, rho);
  const double sad = 300;  // short SAD to make obliquity visible
  const pe::BevGrid g = grid_through_ct(sad);
  const pe::BeamFrame f(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs);
  const pe::RayTrace t = pe::trace_rays(g, f, rsp, rho, 2);
  const int c = 20, r = 10;  // x = 20 mm at the isocentre plane, y = 0
  const double stretch = std::sqrt(1 + std::pow(20.0 / sad, 2));
  EXPECT_NEAR(t.step_mm[static_cast<std::size_t>(r) * g.cols + c], 0.5 * stretch, 1e-6);
  EXPECT_NEAR(t.wepl_far_mm[g.index(g.slices - 1, r, c)], 40 * stretch, 0.1);
}

TEST(RayTrace, Gantry90TracesAlongMinusX) {
  // The same slab turned to lie across x: the gantry-90 beam crosses it.
  Grid3 gr;
  gr.size = {61, 61, 61};
  gr.spacing_mm = {2, 2, 2};
  gr.origin_mm = {-60, -60, -60};
  Volume<float> rsp(gr, 0.0f), rho(gr, 0.0f);
  for (int k = 0; k < 61; ++k)
    for (int j = 0; j < 61; ++j)
      for (int i = 30; i < 61; ++i) {  // x ≥ 0: only the patient's left half
        rsp.at(i, j, k) = 1.0f;
        rho.at(i, j, k) = 1.0f;
      }
  const pe::BevGrid g = grid_through_ct(pe::kParallelSadMm);
  const pe::RayTrace t = pe::trace_rays(g, pe::BeamFrame(90, 0, {0, 0, 0}, pe::PatientPosition::kHfs), rsp, rho, 1);
  // From the left the beam meets material first: x = 61 → 0 mm is 61 mm of WEPL by the isocentre.
  const int c = 10, r = 10;
  const int iso_slice = static_cast<int>(std::lround((0.0 - g.depth0_mm) / g.depth_step_mm));
  EXPECT_NEAR(t.wepl_far_mm[g.index(iso_slice, r, c)], 61.0, 1.1);
  // Gantry 270 meets the empty right half first: nothing by the isocentre.
  const pe::RayTrace t270 =
      pe::trace_rays(g, pe::BeamFrame(270, 0, {0, 0, 0}, pe::PatientPosition::kHfs), rsp, rho, 1);
  EXPECT_LT(t270.wepl_far_mm[g.index(iso_slice - 8, r, c)], 1e-6);  // 2 mm before the edge smear
}

TEST(RayTrace, CropKeepsTheWeplOfTheMaterialInFront) {
  Volume<float> rsp, rho;
  slab_ct(-41, 19, 1.0f, rsp, rho);
  const pe::BevGrid g = grid_through_ct(pe::kParallelSadMm);
  const pe::RayTrace t = pe::trace_rays(g, pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs), rsp, rho, 1);
  const pe::RayTrace c = pe::crop_slices(t, 100, 50);
  EXPECT_EQ(c.grid.slices, 50);
  EXPECT_DOUBLE_EQ(c.grid.depth_mm(0), g.depth_mm(100));
  EXPECT_FLOAT_EQ(c.wepl_near_mm(0, 10, 10), t.wepl_far_mm[g.index(99, 10, 10)]);
  EXPECT_GT(c.wepl_near_mm(0, 10, 10), 0.0f);
  EXPECT_FLOAT_EQ(c.wepl_far_mm[c.grid.index(49, 10, 10)], t.wepl_far_mm[g.index(149, 10, 10)]);
  try {
    pe::crop_slices(t, 300, 50);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[300, 350)"), std::string::npos) << e.what();
  }
}

TEST(RayTrace, TrilinearSampleIsZeroOutsideTheCtAndExactAtCentres) {
  Grid3 gr;
  gr.size = {3, 3, 3};
  Volume<float> v(gr, 0.0f);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 3; ++i) v.at(i, j, k) = static_cast<float>(i + 10 * j + 100 * k);
  EXPECT_FLOAT_EQ(pe::sample_trilinear(v, {1, 2, 1}), 121.0f);
  EXPECT_FLOAT_EQ(pe::sample_trilinear(v, {0.5, 1.5, 0.25}), 0.5f + 15.0f + 25.0f);
  EXPECT_FLOAT_EQ(pe::sample_trilinear(v, {-0.4, 0, 0}), 0.0f);  // within the outer half voxel: edge value
  EXPECT_FLOAT_EQ(pe::sample_trilinear(v, {-0.6, 0, 0}), 0.0f);
  EXPECT_FLOAT_EQ(pe::sample_trilinear(v, {2.4, 2, 2}), 222.0f);
  EXPECT_FLOAT_EQ(pe::sample_trilinear(v, {2.6, 2, 2}), 0.0f);
}

TEST(RayTrace, RejectsVolumesOnDifferentGrids) {
  Volume<float> rsp, rho;
  slab_ct(-21, 19, 1.0f, rsp, rho);
  rho.grid.spacing_mm[0] = 3;
  try {
    pe::trace_rays(grid_through_ct(pe::kParallelSadMm), pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs),
                   rsp, rho, 1);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("different grids"), std::string::npos) << e.what();
  }
}
