#pragma once
/// \file dvh.h
/// Dose-volume histograms of a structure given as a voxel mask on the dose grid
/// (e.g. from dicom::rasterize_roi), and the usual dose and volume metrics.

#include <cstdint>
#include <string>
#include <vector>

#include "protondose/core/grid.h"

namespace protondose::compare {

/// One point of a cumulative DVH.
struct DvhPoint {
  double dose_gy = 0.0;         ///< dose level (Gy)
  double volume_percent = 0.0;  ///< % of the structure receiving at least dose_gy
};

/// Settings of a DVH.
struct DvhOptions {
  /// Prescription dose for V95 (Gy); 0 = the maximum dose in the structure.
  double prescription_gy = 0.0;
  /// Bin width of the cumulative curve (Gy); 0 = 1/200 of the dose maximum in
  /// the structure (the metrics below do not use bins).
  double bin_width_gy = 0.0;
};

/// DVH and metrics of one structure.
struct Dvh {
  std::string roi_name;
  std::size_t voxels = 0;        ///< voxels in the mask
  double volume_cc = 0.0;        ///< voxels × voxel volume (cm³)
  double mean_gy = 0.0;
  double min_gy = 0.0;
  double max_gy = 0.0;
  /// D_x: the dose that at least x % of the volume receives (Gy). The sorted
  /// voxel doses are read at volume fraction x/100, each distinct dose value
  /// placed at the centre of the volume share of the voxels holding it, linear
  /// in between — exact for a dose linear across a box (docs/compare.md, "DVH").
  double d2_gy = 0.0, d50_gy = 0.0, d95_gy = 0.0, d98_gy = 0.0;
  double prescription_gy = 0.0;  ///< the dose V95 refers to (Gy)
  double v95_percent = 0.0;      ///< % of the volume with dose >= 95 % of prescription_gy
  std::vector<DvhPoint> cumulative;  ///< from 0 Gy up to the first bin above the maximum
};

/// D_x of a structure's voxel doses sorted in descending order (see Dvh).
/// Precondition: non-empty; x in [0, 100].
double dose_at_volume_percent(const std::vector<float>& descending_doses_gy, double volume_percent);

/// DVH of the voxels where mask != 0. The mask must be on the dose grid
/// (identical Grid3). Throws InputError naming `roi_name` when the mask is empty
/// or on another grid, or the dose has non-finite values; ConfigError for a
/// negative prescription or bin width.
Dvh compute_dvh(const Volume<float>& dose, const Volume<std::uint8_t>& mask,
                const std::string& roi_name, const DvhOptions& options = {});

}  // namespace protondose::compare
