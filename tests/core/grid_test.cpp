#include "protondose/core/grid.h"

#include <gtest/gtest.h>

#include "protondose/core/error.h"

namespace protondose {
namespace {

Grid3 make_grid() {
  Grid3 g;
  g.size = {4, 5, 6};
  g.spacing_mm = {1.0, 2.0, 3.0};
  g.origin_mm = {-10.0, 20.0, 5.0};
  return g;
}

TEST(Grid3, IndexIsColumnFastest) {
  const Grid3 g = make_grid();
  EXPECT_EQ(g.index(0, 0, 0), 0u);
  EXPECT_EQ(g.index(1, 0, 0), 1u);
  EXPECT_EQ(g.index(0, 1, 0), 4u);
  EXPECT_EQ(g.index(0, 0, 1), 20u);
  EXPECT_EQ(g.voxel_count(), 120u);
}

TEST(Grid3, PositionAndContinuousIndexAreInverse) {
  Grid3 g = make_grid();
  // A rotated (but orthonormal) frame, as for a prone CT: x and y flipped.
  g.axis = {{{-1.0, 0.0, 0.0}, {0.0, -1.0, 0.0}, {0.0, 0.0, 1.0}}};
  const Vec3 p = g.position_mm(1.5, 2.0, 3.25);
  EXPECT_DOUBLE_EQ(p[0], -10.0 - 1.5);
  EXPECT_DOUBLE_EQ(p[1], 20.0 - 4.0);
  EXPECT_DOUBLE_EQ(p[2], 5.0 + 9.75);
  const Vec3 ijk = g.continuous_index(p);
  EXPECT_NEAR(ijk[0], 1.5, 1e-12);
  EXPECT_NEAR(ijk[1], 2.0, 1e-12);
  EXPECT_NEAR(ijk[2], 3.25, 1e-12);
  EXPECT_FALSE(g.axis_aligned());
  EXPECT_TRUE(make_grid().axis_aligned());
}

TEST(Grid3, ValidateRejectsNonPositiveSpacing) {
  Grid3 g = make_grid();
  g.spacing_mm[1] = 0.0;
  try {
    g.validate("CT series /data/ct");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("CT series /data/ct"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("spacing along axis 1 is 0 mm"), std::string::npos);
  }
}

TEST(Grid3, ValidateRejectsEmptyAndSkewedGrids) {
  Grid3 g = make_grid();
  g.size[2] = 0;
  EXPECT_THROW(g.validate("dose grid"), InputError);
  g = make_grid();
  g.axis[1] = {0.5, 0.5, 0.0};
  EXPECT_THROW(g.validate("dose grid"), InputError);
}

TEST(Volume, FillsAndAddresses) {
  Volume<float> v(make_grid(), 2.5f);
  EXPECT_EQ(v.data.size(), 120u);
  v.at(3, 4, 5) = 7.0f;
  EXPECT_EQ(v.data.back(), 7.0f);
  EXPECT_EQ(v.data.front(), 2.5f);
}

}  // namespace
}  // namespace protondose
