#include "protondose/engine/resample.h"

#include <gtest/gtest.h>

#include "protondose/core/error.h"

namespace pe = protondose::engine;
using protondose::Grid3;
using protondose::Volume;

TEST(Resample, LinearBevFieldIsReproducedOnThePatientGrid) {
  pe::BevGridSpec s;
  s.spot_min_x_mm = -40;
  s.spot_max_x_mm = 40;
  s.spot_min_y_mm = -40;
  s.spot_max_y_mm = 40;
  s.sad_x_mm = 2000;
  s.sad_y_mm = 2560;
  s.depth_begin_mm = -40;
  s.depth_end_mm = 40;
  s.depth_step_mm = 1;
  const pe::BevGrid g = pe::make_bev_grid(s);
  // Value = depth (mm) + 100: linear, so trilinear interpolation is exact.
  std::vector<float> bev(g.pixel_count());
  for (int k = 0; k < g.slices; ++k)
    for (int r = 0; r < g.rows; ++r)
      for (int c = 0; c < g.cols; ++c) bev[g.index(k, r, c)] = static_cast<float>(g.depth_mm(k) + 100);
  Grid3 out_grid;
  out_grid.size = {11, 11, 11};
  out_grid.spacing_mm = {3, 3, 3};
  out_grid.origin_mm = {-15, -15, -15};
  Volume<float> out(out_grid, 1.0f);
  const pe::BeamFrame f(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs);
  pe::add_bev_to_patient(g, f, bev, 2.0, out, 2);
  for (int j = 0; j < 11; ++j) {
    const double y = out_grid.position_mm(5, j, 5)[1];  // depth = patient y at gantry 0
    EXPECT_NEAR(out.at(5, j, 5), 1.0 + 2.0 * (y + 100), 1e-3) << "y = " << y;
  }
  // A voxel beyond the BEV grid is untouched.
  Grid3 far = out_grid;
  far.origin_mm = {200, 0, 0};
  Volume<float> out_far(far, 0.0f);
  pe::add_bev_to_patient(g, f, bev, 1.0, out_far, 1);
  EXPECT_FLOAT_EQ(out_far.at(0, 0, 0), 0.0f);
}

TEST(Resample, RejectsBevArrayOfTheWrongSize) {
  pe::BevGrid g;
  g.cols = g.rows = g.slices = 2;
  Grid3 og;
  og.size = {1, 1, 1};
  Volume<float> out(og, 0.0f);
  try {
    pe::add_bev_to_patient(g, pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs), std::vector<float>(7), 1,
                           out);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("7 BEV values for a grid of 8 pixels"), std::string::npos) << e.what();
  }
}
