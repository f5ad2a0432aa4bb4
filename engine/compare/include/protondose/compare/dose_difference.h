#pragma once
/// \file dose_difference.h
/// Voxel-wise dose difference statistics, dose profiles along a line and the
/// distal falloff (R80, R20) of a depth-dose profile.

#include <cstddef>
#include <vector>

#include "protondose/core/grid.h"

namespace protondose::compare {

/// Which reference voxels enter the dose-difference statistics.
struct DoseDifferenceOptions {
  /// Dose that the per-cent figures and the threshold refer to (Gy); 0 = maximum
  /// of the reference dose.
  double normalisation_dose_gy = 0.0;
  /// Reference voxels with D_ref < threshold_percent % of the normalisation dose
  /// are left out. In [0, 100).
  double threshold_percent = 10.0;
};

/// Statistics of ΔD = D_eval − D_ref over the reference voxels at or above the
/// threshold (evaluated dose resampled onto the reference grid).
struct DoseDifferenceResult {
  std::size_t voxels = 0;            ///< voxels in the threshold mask
  double normalisation_dose_gy = 0;  ///< what the per-cent values are of
  double threshold_dose_gy = 0;      ///< absolute low-dose cut (Gy)
  double mean_gy = 0;                ///< mean ΔD (Gy)
  double rms_gy = 0;                 ///< root mean square of ΔD (Gy)
  double max_gy = 0;                 ///< largest ΔD (Gy): the evaluated dose's worst excess
  double min_gy = 0;                 ///< smallest (most negative) ΔD (Gy)
  double max_abs_gy = 0;             ///< largest |ΔD| (Gy)
  double mean_percent = 0;           ///< the same, in % of the normalisation dose
  double rms_percent = 0;
  double max_percent = 0;
  double min_percent = 0;
  double max_abs_percent = 0;
};

/// ΔD statistics of `eval` against `ref`; `eval` is resampled onto the reference
/// grid if the grids differ. Throws InputError for mismatched data sizes,
/// non-finite doses, a reference dose that is zero everywhere or no voxel at or
/// above the threshold; ConfigError for a threshold outside [0, 100) or a
/// negative normalisation dose.
DoseDifferenceResult dose_difference(const Volume<float>& ref, const Volume<float>& eval,
                                     const DoseDifferenceOptions& options = {});

/// D_eval − D_ref on the reference grid (Gy), `eval` resampled if needed.
/// Throws as dose_difference for mismatched or non-finite volumes.
Volume<float> dose_difference_volume(const Volume<float>& ref, const Volume<float>& eval);

/// One sample of a dose profile.
struct ProfilePoint {
  double distance_mm = 0.0;  ///< distance from the profile's start point (mm)
  double dose_gy = 0.0;      ///< trilinearly interpolated dose (Gy); 0 outside the grid
};

/// Samples `dose` every `step_mm` on the segment from start_mm to end_mm
/// (patient frame, mm), both ends included (the last step may be shorter).
/// Throws InputError if step_mm is not > 0, the segment has zero length or the
/// volume does not match its grid.
std::vector<ProfilePoint> dose_profile(const Volume<float>& dose, const Vec3& start_mm,
                                       const Vec3& end_mm, double step_mm);

/// Direction of travel (unit vector, DICOM patient frame) of a beam at IEC
/// gantry angle `gantry_deg` for a head-first-supine patient and couch angle 0:
/// (−sin θ, cos θ, 0) — gantry 0 enters anteriorly and travels +y (posterior),
/// gantry 90 enters from the patient's left and travels −x. Throws
/// UnavailableError for a couch angle other than 0 (not implemented).
Vec3 beam_direction_hfs(double gantry_deg, double couch_deg);

/// Dose along the line through `isocenter_mm` in direction `direction` (need
/// not be normalised), clipped to the grid's extent, sampled every step_mm.
/// distance_mm of each point is the signed distance from the isocentre along
/// the direction (negative upstream). Throws InputError if the line misses the
/// grid, the direction is zero or step_mm is not > 0.
std::vector<ProfilePoint> depth_profile_along_beam(const Volume<float>& dose, const Vec3& isocenter_mm,
                                                   const Vec3& direction, double step_mm);

/// Distal falloff of a depth-dose profile.
struct DistalFalloff {
  double max_dose_gy = 0.0;       ///< profile maximum (Gy)
  double max_position_mm = 0.0;   ///< distance of the maximum along the profile (mm)
  double r80_mm = 0.0;            ///< distal position where the dose falls to 80 % of the maximum (mm)
  double r20_mm = 0.0;            ///< distal position where the dose falls to 20 % of the maximum (mm)
};

/// R80 and R20: the distal-most positions where the dose falls below 80 % and
/// 20 % of the profile maximum (after the last sample at or above the level,
/// linear between samples), so a dip between Bragg peaks of several energies
/// or noise on a plateau is not taken for the falloff. Throws InputError if the profile has fewer than two
/// points, its maximum is not positive, or it does not fall below 20 % of the
/// maximum distal to it (the profile ends too early).
DistalFalloff distal_falloff(const std::vector<ProfilePoint>& profile);

}  // namespace protondose::compare
