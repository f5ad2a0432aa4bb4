// RT Structure Set reading and rasterisation against the slab reference case
// (reference/README.md, case.json): water box x ∈ [−100, 100], y ∈ [−100, 150],
// z ∈ [−100, 100] mm; bone slab x ∈ [−100, 0], lung slab x ∈ [0, 100], both
// y ∈ [−80, −60], z ∈ [−100, 100]. CT voxel centres are at odd mm (2 mm
// pitch from −109), so no centre lies on a box face and the analytic voxel
// count is exact: (extent / 2 mm) per axis.
#include <gtest/gtest.h>

#include <numeric>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/rt_struct.h"

namespace protondose::dicom {
namespace {

using test::shared;

Grid3 slab_ct_grid() {
  Grid3 g;
  g.size = {110, 135, 110};
  g.spacing_mm = {2, 2, 2};
  g.origin_mm = {-109, -119, -109};
  return g;
}

std::size_t count(const Volume<std::uint8_t>& mask) {
  return std::accumulate(mask.data.begin(), mask.data.end(), std::size_t{0});
}

TEST(RtStructReader, ReadsTheSlabStructureSet) {
  const StructureSet set = read_rt_structure_set(shared("reference/slab_dcpt/rtstruct.dcm"));
  ASSERT_EQ(set.rois.size(), 3u);
  EXPECT_EQ(set.rois[0].name, "External");
  EXPECT_EQ(set.rois[0].interpreted_type, "EXTERNAL");
  EXPECT_EQ(set.rois[1].name, "Bone_slab");
  EXPECT_EQ(set.rois[2].name, "Lung_slab");
  EXPECT_EQ(set.frame_of_reference_uid, "2.25.191645871060748269088958807794064710561");
  // dcmdump: 300 CLOSED_PLANAR contours of 4 points, 100 per ROI (z = −99 … 99).
  for (const auto& roi : set.rois) {
    EXPECT_EQ(roi.contours.size(), 100u) << roi.name;
    for (const auto& c : roi.contours) EXPECT_EQ(c.points_mm.size(), 4u);
  }
}

TEST(RoiRasterizer, SlabBoxesGiveTheirAnalyticVoxelCounts) {
  const StructureSet set = read_rt_structure_set(shared("reference/slab_dcpt/rtstruct.dcm"));
  const Grid3 grid = slab_ct_grid();
  EXPECT_EQ(count(rasterize_roi(set, "External", grid)), 100u * 125u * 100u);  // 200 × 250 × 200 mm
  EXPECT_EQ(count(rasterize_roi(set, "Bone_slab", grid)), 50u * 10u * 100u);   // 100 × 20 × 200 mm
  EXPECT_EQ(count(rasterize_roi(set, "Lung_slab", grid)), 50u * 10u * 100u);
}

TEST(RoiRasterizer, BoneSlabMaskMatchesTheCtHounsfieldUnits) {
  // The CT holds HU 1300 exactly in the bone slab: the mask and the CT agree voxel by voxel.
  const StructureSet set = read_rt_structure_set(shared("reference/slab_dcpt/rtstruct.dcm"));
  const CtImage ct = read_ct_series(shared("reference/slab_dcpt/ct"));
  const auto mask = rasterize_roi(set, "Bone_slab", ct.hu.grid);
  std::size_t disagreements = 0;
  for (std::size_t p = 0; p < mask.data.size(); ++p)
    disagreements += (mask.data[p] == 1) != (ct.hu.data[p] == 1300.0F);
  EXPECT_EQ(disagreements, 0u);
}

TEST(RoiRasterizer, FinerGridUsesTheNearestContourPlaneWithinHalfItsSpacing) {
  // 1 mm grid over z ∈ [−104.5, 104.5]: contour planes at odd z every 2 mm
  // cover z ∈ [−100, 100] → voxel slices −100 … 100 (201 slices, both faces
  // included since they are exactly half a plane spacing away).
  const StructureSet set = read_rt_structure_set(shared("reference/slab_dcpt/rtstruct.dcm"));
  Grid3 g;
  g.size = {40, 40, 210};
  g.spacing_mm = {1, 1, 1};
  g.origin_mm = {-39.5, -79.5, -104.5};  // x −39.5 … −0.5, y −79.5 … −40.5
  const auto mask = rasterize_roi(set, "Bone_slab", g);
  // x: 40 centres inside [−100, 0]; y: −79.5 … −60.5 → 20; z: −104.5 + k within [−100, 100] → 200.
  EXPECT_EQ(count(mask), 40u * 20u * 200u);
}

TEST(RoiRasterizer, RejectsAnUnknownRoiListingTheNames) {
  const StructureSet set = read_rt_structure_set(shared("reference/slab_dcpt/rtstruct.dcm"));
  EXPECT_THROW_WITH(rasterize_roi(set, "PTV", slab_ct_grid()), InputError, "no ROI named 'PTV'", "'External'",
                    "'Bone_slab'");
}

TEST(RoiRasterizer, RejectsAnRoiOutsideTheGridAsEmpty) {
  const StructureSet set = read_rt_structure_set(shared("reference/slab_dcpt/rtstruct.dcm"));
  Grid3 g;
  g.size = {10, 10, 10};
  g.origin_mm = {500, 500, 0};
  EXPECT_THROW_WITH(rasterize_roi(set, "Lung_slab", g), InputError, "ROI 'Lung_slab'", "no voxel centre");
}

TEST(RoiRasterizer, RejectsContoursNotPerpendicularToTheSliceAxis) {
  StructureSet set;
  Roi roi;
  roi.name = "Tilted";
  roi.contours.push_back({{{0, 0, 0}, {10, 0, 5}, {10, 10, 5}, {0, 10, 0}}});
  set.rois.push_back(roi);
  Grid3 g;
  g.size = {20, 20, 20};
  EXPECT_THROW_WITH(rasterize_roi(set, "Tilted", g), InputError, "ROI 'Tilted'", "not in a plane perpendicular");
}

TEST(RoiRasterizer, InnerContourOnTheSamePlaneIsAHole) {
  // 10 × 10 mm square with a 4 × 4 mm hole, one plane, 1 mm grid: 100 − 16 centres.
  StructureSet set;
  Roi roi;
  roi.name = "Ring";
  roi.contours.push_back({{{-0.01, -0.01, 0}, {10.01, -0.01, 0}, {10.01, 10.01, 0}, {-0.01, 10.01, 0}}});
  roi.contours.push_back({{{2.99, 2.99, 0}, {7.01, 2.99, 0}, {7.01, 7.01, 0}, {2.99, 7.01, 0}}});
  set.rois.push_back(roi);
  Grid3 g;
  g.size = {12, 12, 3};
  g.origin_mm = {0.5, 0.5, -1};
  // Centres x, y = 0.5 … 11.5: 10 per axis in [0, 10]; the hole [3, 7] holds 4 per axis.
  const auto mask = rasterize_roi(set, "Ring", g);
  EXPECT_EQ(count(mask), 100u - 16u);
  EXPECT_EQ(mask.at(4, 4, 1), 0);  // centre (4.5, 4.5) in the hole
  EXPECT_EQ(mask.at(1, 1, 1), 1);
  // A single contour plane reaches half the grid's slice spacing: only the
  // slice through z = 0, not those at z = ±1 mm.
  EXPECT_EQ(mask.at(1, 1, 0), 0);
  EXPECT_EQ(mask.at(1, 1, 2), 0);
}

}  // namespace
}  // namespace protondose::dicom
