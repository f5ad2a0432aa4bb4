// The coarse halo grid's pads (beam_geometry.h, halo_pads): clipped to what
// the resampling reads, the grid must give every output voxel the trilinear
// sample of the same pixels with the same weights as the grid padded by the
// halo's whole reach (to the rounding of the fractional index) — on oblique
// and divergent beams, with the output grid beside, around or inside the
// beam's.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "beam_geometry.h"

namespace pe = protondose::engine;
namespace k = protondose::engine::kernels;

namespace {

/// A value per physical coarse pixel (slice, row and column counted from the
/// fine grid's first block): the same pixel holds the same value in any
/// padding of the grid.
float pixel_value(int slice, int row, int col) {
  std::uint32_t h = static_cast<std::uint32_t>(slice) * 7919u + static_cast<std::uint32_t>(row + 1000) * 104729u +
                    static_cast<std::uint32_t>(col + 1000) * 15485863u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return 1.0f + static_cast<float>(h % 1000u) / 100.0f;
}

/// The halo grid of `fine` at f rays a coarse pixel with the given pads, and
/// its values (pixel_value).
struct CoarseGrid {
  pe::BevGrid grid;
  std::vector<float> values;
  CoarseGrid(const pe::BevGrid& fine, int f, const pe::HaloPads& p) : grid(pe::halo_grid(fine, f, p)) {
    values.resize(grid.pixel_count());
    for (int s = 0; s < grid.slices; ++s)
      for (int r = 0; r < grid.rows; ++r)
        for (int c = 0; c < grid.cols; ++c)
          values[grid.index(s, r, c)] = pixel_value(s, r - p.rows_before, c - p.cols_before);
  }
};

struct PadCase {
  std::string name;
  double gantry_deg, couch_deg, sad_mm;
  protondose::Vec3 out_origin_mm;
  std::array<int, 3> out_size;
  double out_spacing_mm;
};

}  // namespace

TEST(HaloPads, ClippedGridSamplesEveryOutputVoxelAsTheWholeReachDoes) {
  const int f = 4, reach = 40;
  pe::BevGrid fine;
  fine.pitch_x_mm = 2.0;
  fine.pitch_y_mm = 2.5;
  fine.cols = 37;  // not a multiple of f
  fine.rows = 30;
  fine.x0_mm = -0.5 * (fine.cols - 1) * fine.pitch_x_mm + 3.0;
  fine.y0_mm = -0.5 * (fine.rows - 1) * fine.pitch_y_mm - 4.0;
  fine.depth0_mm = -90.0;
  fine.depth_step_mm = 6.0;
  fine.slices = 32;
  const std::vector<PadCase> cases = {
      {"output around the beam, divergent", 0, 0, 2000, {-120, -120, -100}, {40, 40, 34}, 6.0},
      {"output inside the beam's rays", 0, 0, 2000, {-20, -20, -20}, {8, 8, 8}, 5.0},
      {"oblique with couch, divergent", 35, 20, 1800, {-100, -90, -80}, {30, 28, 26}, 7.0},
      {"output to one side, parallel", 90, 0, pe::kParallelSadMm, {20, -60, -50}, {25, 20, 20}, 5.0},
      {"output wider than the reach", 0, 0, 2000, {-600, -600, -600}, {61, 61, 61}, 20.0},
  };
  int clipped_cases = 0, whole_cases = 0;
  for (const PadCase& c : cases) {
    fine.sad_x_mm = c.sad_mm;
    fine.sad_y_mm = c.sad_mm * 1.1;
    protondose::Grid3 out;
    out.size = c.out_size;
    out.spacing_mm = {c.out_spacing_mm, c.out_spacing_mm, c.out_spacing_mm};
    out.origin_mm = c.out_origin_mm;
    const pe::BeamFrame frame(c.gantry_deg, c.couch_deg, {0, 0, 0}, pe::PatientPosition::kHfs);
    const k::Affine3 beam_from_out = pe::beam_from_voxel_index(out, frame);
    const pe::HaloPads pads = pe::halo_pads(fine, f, reach, beam_from_out, out.size);
    for (int p : {pads.cols_before, pads.rows_before, pads.cols_after, pads.rows_after}) {
      ASSERT_GE(p, 0) << c.name;
      ASSERT_LE(p, reach) << c.name;
    }
    const bool clipped = pads.cols_before + pads.rows_before + pads.cols_after + pads.rows_after < 4 * reach;
    clipped_cases += clipped;
    whole_cases += !clipped;
    const CoarseGrid whole(fine, f, pe::HaloPads{reach, reach, reach, reach}), part(fine, f, pads);
    const k::BevGeometry whole_g = pe::geometry_of(whole.grid), part_g = pe::geometry_of(part.grid);
    int non_zero = 0;
    for (int kk = 0; kk < out.size[2]; ++kk)
      for (int j = 0; j < out.size[1]; ++j)
        for (int i = 0; i < out.size[0]; ++i) {
          double p[3];
          beam_from_out.apply(i, j, kk, p);
          // The GPU's float samples and the CPU's double ones.
          const float a = k::sample_bev_at<float>(whole_g, whole.values.data(), p[0], p[1], p[2]);
          const float b = k::sample_bev_at<float>(part_g, part.values.data(), p[0], p[1], p[2]);
          const float ad = k::sample_bev_at<double>(whole_g, whole.values.data(), p[0], p[1], p[2]);
          const float bd = k::sample_bev_at<double>(part_g, part.values.data(), p[0], p[1], p[2]);
          const auto where = [&] {
            return c.name + ", voxel (" + std::to_string(i) + ", " + std::to_string(j) + ", " + std::to_string(kk) + ")";
          };
          // The same pixels and weights: in double (the CPU's) to the float
          // result's ulp; in float (the GPU's) the fractional index, counted
          // from another first pixel, rounds to another float (an ulp of an
          // index below 128, < 10⁻⁵ px) and the sample moves by that times
          // the values' slope (here up to 10 a pixel; the halo dose is smooth).
          ASSERT_EQ(ad == 0.0f, bd == 0.0f) << where();
          ASSERT_NEAR(ad, bd, 3e-7f * std::abs(ad)) << where();
          ASSERT_EQ(a == 0.0f, b == 0.0f) << where();
          ASSERT_NEAR(a, b, 3 * 10 * 1e-5f) << where();
          non_zero += a != 0.0f;
        }
    EXPECT_GT(non_zero, 0) << c.name << ": the output grid must meet the halo grid";
  }
  EXPECT_GE(clipped_cases, 3) << "the cases must clip the pads";
  EXPECT_GE(whole_cases, 1) << "a case must need the whole reach";
}
