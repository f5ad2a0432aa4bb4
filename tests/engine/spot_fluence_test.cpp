#include "protondose/engine/spot_fluence.h"

#include <gtest/gtest.h>

#include <cmath>

#include <numeric>

#include "protondose/core/error.h"

namespace pe = protondose::engine;

namespace {
pe::BevGrid grid_1mm() {
  pe::BevGridSpec s;
  s.spot_min_x_mm = -30;
  s.spot_max_x_mm = 30;
  s.spot_min_y_mm = -30;
  s.spot_max_y_mm = 30;
  s.depth_begin_mm = 0;
  s.depth_end_mm = 1;
  return pe::make_bev_grid(s);
}
}  // namespace

TEST(SpotFluence, ConservesProtonsAndCentroidOfAnOffGridSpot) {
  const pe::BevGrid g = grid_1mm();
  const std::vector<pe::SpotProtons> spots{{3.3, -7.6, 1e6}};
  const std::vector<double> f = pe::spread_spots_to_rays(g, spots, 4.0, 5.0, 4.0);
  double sum = 0, sx = 0, sy = 0, sxx = 0;
  for (int r = 0; r < g.rows; ++r)
    for (int c = 0; c < g.cols; ++c) {
      const double v = f[static_cast<std::size_t>(r) * g.cols + c];
      sum += v;
      sx += v * g.iso_x_mm(c);
      sy += v * g.iso_y_mm(r);
      sxx += v * (g.iso_x_mm(c) - 3.3) * (g.iso_x_mm(c) - 3.3);
    }
  // The 4σ cut-off drops 6.3e-5 per axis.
  EXPECT_NEAR(sum / 1e6, 1.0, 2e-4);
  EXPECT_NEAR(sx / sum, 3.3, 1e-3);
  EXPECT_NEAR(sy / sum, -7.6, 1e-3);
  // Pixel integration adds 1/12 px² to the variance.
  EXPECT_NEAR(std::sqrt(sxx / sum), std::sqrt(16.0 + 1.0 / 12.0), 0.02);
}

TEST(SpotFluence, ZeroSigmaPutsAllProtonsOnTheNearestRay) {
  const pe::BevGrid g = grid_1mm();
  const std::vector<double> f = pe::spread_spots_to_rays(g, {{0.2, 0.0, 5.0}}, 0.0, 0.0, 3.0);
  EXPECT_DOUBLE_EQ(std::accumulate(f.begin(), f.end(), 0.0), 5.0);
  EXPECT_DOUBLE_EQ(f[static_cast<std::size_t>(30) * g.cols + 30], 5.0);
}

TEST(SpotFluence, RejectsNegativeProtons) {
  try {
    pe::spread_spots_to_rays(grid_1mm(), {{0, 0, 1}, {1, 2, -3}}, 1, 1, 3);
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("spot 1 at (1, 2) mm has -3 protons"), std::string::npos) << e.what();
  }
}

TEST(SpotFluence, RejectsNegativeSigma) {
  EXPECT_THROW(pe::spread_spots_to_rays(grid_1mm(), {{0, 0, 1}}, -1, 1, 3), protondose::InputError);
}
