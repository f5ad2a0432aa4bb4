#pragma once
/// \file rt_struct.h
/// RT Structure Set reading and rasterisation of ROIs onto voxel grids.

#include <cstdint>
#include <string>
#include <vector>

#include "protondose/core/grid.h"

namespace protondose::dicom {

/// One closed planar contour (ContourGeometricType CLOSED_PLANAR), points in
/// the DICOM patient frame (mm), implicitly closed (last → first).
struct Contour {
  std::vector<Vec3> points_mm;
};

/// One ROI: StructureSetROISequence item joined with its ROIContourSequence item.
struct Roi {
  int number = 0;                       ///< ROINumber
  std::string name;                     ///< ROIName
  std::string frame_of_reference_uid;   ///< ReferencedFrameOfReferenceUID
  std::string interpreted_type;         ///< RTROIInterpretedType (EXTERNAL, PTV, ...); may be empty
  std::vector<Contour> contours;        ///< CLOSED_PLANAR contours only
};

/// An RT Structure Set.
struct StructureSet {
  std::string sop_instance_uid;
  std::string frame_of_reference_uid;  ///< of the first ReferencedFrameOfReferenceSequence item
  std::string label;                   ///< StructureSetLabel
  std::vector<Roi> rois;               ///< in StructureSetROISequence order

  /// The ROI named `name` (exact match); InputError listing the names otherwise.
  const Roi& roi(const std::string& name) const;
};

/// Reads an RT Structure Set. Contours other than CLOSED_PLANAR (POINT,
/// OPEN_PLANAR) are skipped. Throws IoError, InputError (not RTSTRUCT,
/// ContourData length not 3 × NumberOfContourPoints, fewer than 3 points,
/// non-planar contour; message names file, ROI and tag).
StructureSet read_rt_structure_set(const std::string& path);

/// Binary mask (1 inside, 0 outside) of ROI `roi_name` on `grid`.
///
/// Contour planes must be perpendicular to grid.axis[2]. Each voxel slice k
/// takes the contours of the nearest contour plane, if that plane lies within
/// half the ROI's contour-plane spacing (the grid's slice spacing when the ROI
/// has a single plane) of the slice centre; a voxel is inside when its centre
/// (i, j) is inside an odd number of that plane's polygons (even–odd rule, so
/// holes stated as inner contours are excluded).
/// Throws InputError for an unknown ROI, an ROI without closed planar
/// contours, contours not perpendicular to axis[2], or an empty mask
/// (no voxel centre inside), naming the ROI.
Volume<std::uint8_t> rasterize_roi(const StructureSet& structures, const std::string& roi_name,
                                   const Grid3& grid);

}  // namespace protondose::dicom
