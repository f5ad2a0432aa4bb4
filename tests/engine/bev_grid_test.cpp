#include "protondose/engine/bev_grid.h"

#include <gtest/gtest.h>

#include <cmath>

#include "protondose/core/error.h"

namespace pe = protondose::engine;

namespace {

pe::BevGridSpec small_spec() {
  pe::BevGridSpec s;
  s.spot_min_x_mm = -10;
  s.spot_max_x_mm = 10;
  s.spot_min_y_mm = -4;
  s.spot_max_y_mm = 6;
  s.margin_x_mm = 5;
  s.margin_y_mm = 2;
  s.pitch_x_mm = 1;
  s.pitch_y_mm = 2;
  s.sad_x_mm = 2000;
  s.sad_y_mm = 2560;
  s.depth_begin_mm = -100;
  s.depth_end_mm = 50;
  s.depth_step_mm = 2;
  return s;
}

}  // namespace

TEST(BevGrid, CoversSpotsPlusMarginAndTheDepthRange) {
  const pe::BevGrid g = pe::make_bev_grid(small_spec());
  EXPECT_EQ(g.cols, 31);  // −15 … 15 mm every 1 mm
  EXPECT_EQ(g.rows, 8);   // −6 … 8 mm every 2 mm
  EXPECT_DOUBLE_EQ(g.iso_x_mm(0), -15);
  EXPECT_DOUBLE_EQ(g.iso_x_mm(30), 15);
  EXPECT_DOUBLE_EQ(g.iso_y_mm(0), -6);
  EXPECT_DOUBLE_EQ(g.iso_y_mm(7), 8);
  EXPECT_EQ(g.slices, 75);
  EXPECT_DOUBLE_EQ(g.depth_mm(0), -99);
  EXPECT_GE(g.depth_mm(g.slices - 1) + 1, 50);
}

TEST(BevGrid, DivergentRaysScaleWithSeparateSourceDistances) {
  const pe::BevGrid g = pe::make_bev_grid(small_spec());
  // Column 30 crosses the isocentre plane at x = 15 mm; 200 mm downstream of
  // it (slice at depth 200) it is at 15·(1 + 200/2000) = 16.5 mm.
  const double slice = (200 - g.depth0_mm) / g.depth_step_mm;
  const protondose::Vec3 p = g.beam_point_mm(30, 7, slice);
  EXPECT_NEAR(p[0], 15 * 1.1, 1e-12);
  EXPECT_NEAR(p[1], 8 * (1 + 200.0 / 2560), 1e-12);
  EXPECT_NEAR(p[2], 200, 1e-12);
  const protondose::Vec3 back = g.continuous_index(p);
  EXPECT_NEAR(back[0], 30, 1e-12);
  EXPECT_NEAR(back[1], 7, 1e-12);
  EXPECT_NEAR(back[2], slice, 1e-12);
  EXPECT_NEAR(g.path_per_depth(30, 7), std::sqrt(1 + std::pow(15.0 / 2000, 2) + std::pow(8.0 / 2560, 2)), 1e-15);
}

TEST(BevGrid, ParallelBeamIsTheInfiniteSadLimit) {
  pe::BevGridSpec s = small_spec();
  s.sad_x_mm = pe::kParallelSadMm;
  s.sad_y_mm = pe::kParallelSadMm;
  const pe::BevGrid g = pe::make_bev_grid(s);
  EXPECT_DOUBLE_EQ(g.beam_point_mm(30, 0, 40)[0], 15);
  EXPECT_DOUBLE_EQ(g.path_per_depth(30, 7), 1.0);
  EXPECT_DOUBLE_EQ(g.magnification_y(-500), 1.0);
}

TEST(BevGrid, RejectsNonPositivePitch) {
  pe::BevGridSpec s = small_spec();
  s.pitch_y_mm = 0;
  try {
    pe::make_bev_grid(s);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ray pitch y is 0 mm"), std::string::npos) << e.what();
  }
}

TEST(BevGrid, RejectsAGridThatReachesTheVirtualSource) {
  pe::BevGridSpec s = small_spec();
  s.depth_begin_mm = -2100;  // upstream of the x source at −2000 mm
  try {
    pe::make_bev_grid(s);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("virtual source"), std::string::npos) << e.what();
  }
}

TEST(BevGrid, RejectsEmptyDepthRangeAndNegativeSad) {
  pe::BevGridSpec s = small_spec();
  s.depth_end_mm = s.depth_begin_mm;
  EXPECT_THROW(pe::make_bev_grid(s), protondose::InputError);
  s = small_spec();
  s.sad_x_mm = -5;
  try {
    pe::make_bev_grid(s);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("virtual source-axis distance x is -5 mm"), std::string::npos) << e.what();
  }
}
