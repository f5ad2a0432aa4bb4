#pragma once
/// \file ct_series.h
/// Reading and writing DICOM CT Image Storage series.

#include <optional>
#include <string>
#include <vector>

#include "protondose/core/plan.h"

namespace protondose::dicom {

/// Tolerances used when a CT series is assembled from its slices.
struct CtSeriesTolerance {
  /// Largest accepted deviation of one slice gap from the mean gap (mm). Slice
  /// positions printed with 6–8 significant digits differ by ~1e-4 mm; real
  /// non-uniform series differ by ≥ 0.1 mm.
  static constexpr double kSliceGapMm = 0.01;
  /// Largest accepted |cosine| deviation between slices' ImageOrientationPatient
  /// and from an axis-aligned direction (1e-4 ≈ 0.006°).
  static constexpr double kDirectionCosine = 1e-4;
};

/// Reads the CT series in `folder` (not recursive) into Hounsfield units.
///
/// Files that are not DICOM or not CT Image Storage (RT Plan, RT Dose,
/// RTSTRUCT, text) are skipped. With several CT series in the folder,
/// `series_uid` picks one; empty with more than one series → InputError
/// listing each SeriesInstanceUID with its slice count.
///
/// Slices are sorted by their position along the slice normal
/// (ImagePositionPatient · (row × column cosines)). The result's grid:
/// origin_mm = ImagePositionPatient of the first slice (centre of its first
/// voxel), axis[0] = row direction cosines (increasing column index),
/// axis[1] = column direction cosines, axis[2] = slice normal oriented toward
/// increasing slice position; spacing = (PixelSpacing[1], PixelSpacing[0],
/// mean slice gap). HU = stored value × RescaleSlope + RescaleIntercept.
///
/// Throws InputError (naming file and tag keyword (gggg,eeee)) for: no CT in
/// the folder, unknown series_uid, missing geometry tags, inconsistent
/// Rows/Columns/PixelSpacing/orientation/FrameOfReferenceUID between slices,
/// duplicate slice positions, non-uniform slice gaps (> kSliceGapMm),
/// truncated or compressed pixel data it cannot decode; IoError when the
/// folder cannot be listed; UnavailableError for oblique orientation
/// (not axis-aligned within kDirectionCosine) or GantryDetectorTilt ≠ 0.
CtImage read_ct_series(const std::string& folder, const std::string& series_uid = "");

/// read_ct_series plus what CtImage does not carry.
struct CtSeriesReadResult {
  CtImage ct;
  /// Slice files in slice order k (sorted along the normal).
  std::vector<std::string> slice_files;
  /// PixelPaddingValue (0028,0120) converted to HU, when the series states
  /// one: voxels outside the reconstructed field of view (often −2000 or
  /// −3024 HU) that are not tissue. They are left as stored (HU below any
  /// calibration) — the caller decides (e.g. treat as air).
  std::optional<float> padding_hu;
  std::size_t padding_voxels = 0;  ///< voxels whose stored value is the padding value
};

/// read_ct_series with the details above; same checks and errors.
CtSeriesReadResult read_ct_series_detailed(const std::string& folder, const std::string& series_uid = "");

/// Options for write_ct_series.
struct CtWriteOptions {
  /// false: int16 pixels, RescaleIntercept 0 (HU −32768…32767).
  /// true: uint16 pixels, RescaleIntercept −1024 (HU −1024…64511), as many
  /// scanners write.
  bool unsigned_pixels = false;
  std::string series_description = "protondose CT";
  std::string manufacturer = "protondose";
  int series_number = 1;
};

/// Writes `ct` as a CT Image Storage series, one file per slice
/// (CT.0001.dcm, CT.0002.dcm, ... in slice order k) in `folder` (created if
/// missing; use an empty folder — files of those names are replaced, other
/// files are left alone). HU are rounded to the nearest integer
/// (RescaleSlope 1). Empty UIDs in `ct` (study, series, frame of reference)
/// are generated fresh; patient name/ID are copied. Each file is written
/// atomically. ImagePositionPatient of slice k = grid.position_mm(0,0,k),
/// ImageOrientationPatient = axis[0], axis[1]. read_ct_series returns the
/// same grid when axis[2] = axis[0] × axis[1] (right-handed); for a
/// left-handed grid it returns the same voxels in reverse slice order.
/// Throws InputError for an invalid grid or HU outside the pixel range of the
/// chosen representation (naming the voxel and value), IoError on write failure.
void write_ct_series(const CtImage& ct, const std::string& folder,
                     const CtWriteOptions& options = {});

}  // namespace protondose::dicom
