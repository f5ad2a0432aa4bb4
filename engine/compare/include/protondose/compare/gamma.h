#pragma once
/// \file gamma.h
/// 3D gamma index (Low, Harms, Mutic, Purdy, Med Phys 25:656, 1998):
///
///   γ(r) = min over r' of sqrt( |r' − r|² / Δd² + (D_eval(r') − D_ref(r))² / ΔD² )
///
/// for every reference voxel r above the low-dose threshold, with the evaluated
/// dose interpolated trilinearly between its voxels (sub-voxel search, as
/// AAPM TG-218 recommends). The search and its exactness are described in
/// docs/compare.md ("Gamma").

#include <cstddef>
#include <optional>

#include "protondose/core/grid.h"

namespace protondose::compare {

/// Value stored in GammaResult::gamma for voxels that were not evaluated
/// (reference dose below the low-dose threshold).
inline constexpr float kGammaNotEvaluated = -1.0f;

/// Criteria and search settings of a gamma comparison.
struct GammaOptions {
  /// ΔD in per cent: of the normalisation dose (global) or of the reference
  /// dose at the voxel (local). > 0.
  double dose_criterion_percent = 3.0;
  double distance_mm = 3.0;  ///< Δd, distance to agreement (mm), > 0
  bool local = false;        ///< local ΔD (per cent of D_ref(r)) instead of global
  /// Dose that global ΔD and the threshold are per cent of (Gy); 0 = maximum of
  /// the reference dose.
  double normalisation_dose_gy = 0.0;
  /// Reference voxels with D_ref < threshold_percent % of the normalisation dose
  /// are not evaluated. In [0, 100); must be > 0 for local gamma.
  double threshold_percent = 10.0;
  /// Search radius (mm); 0 = 3 × distance_mm. Must be >= distance_mm, so a voxel
  /// whose best match lies farther away fails whatever its exact γ.
  double max_search_mm = 0.0;
  /// Sub-voxel search resolution as a fraction of distance_mm: the evaluated
  /// dose is sampled at spacing <= resolution_fraction · distance_mm wherever a
  /// γ below the best one found so far cannot be excluded. In (0, 0.5];
  /// TG-218 asks for <= 0.1 (the default).
  double resolution_fraction = 0.1;
  /// The search skips a region unless it could lower γ by more than this
  /// (absolute, in γ units; >= 0). 0 = exhaustive to the resolution above.
  double tolerance = 0.001;
  int threads = 0;                 ///< worker threads, 0 = default_thread_count()
  bool keep_gamma_volume = false;  ///< fill GammaResult::gamma

  /// Throws ConfigError naming the option, its value and the accepted range.
  void validate() const;
};

/// Summary of a gamma comparison over the evaluated (above-threshold) voxels.
struct GammaResult {
  double pass_rate_percent = 0.0;  ///< 100 × (voxels with γ <= 1) / evaluated voxels
  double mean_gamma = 0.0;
  double p95_gamma = 0.0;  ///< 95th percentile (linear between order statistics)
  double max_gamma = 0.0;
  std::size_t evaluated_voxels = 0;  ///< reference voxels at or above the threshold
  std::size_t passed_voxels = 0;
  double normalisation_dose_gy = 0.0;  ///< the dose ΔD (global) and the threshold refer to
  double threshold_dose_gy = 0.0;      ///< absolute low-dose cut (Gy)
  double max_search_mm = 0.0;          ///< the search radius used (mm)
  double resolution_mm = 0.0;          ///< the sub-voxel search resolution used (mm)
  /// Evaluated voxels whose γ exceeds max_search_mm / distance_mm: their true
  /// γ lies between that bound and the reported value (they fail either way).
  std::size_t search_limited_voxels = 0;
  /// Reference voxels outside the evaluated dose grid's extent (evaluated dose
  /// taken as 0 there); 0 when both doses share a grid.
  std::size_t reference_voxels_outside_evaluated = 0;
  /// γ on the reference grid; kGammaNotEvaluated below the threshold. Only when
  /// GammaOptions::keep_gamma_volume.
  std::optional<Volume<float>> gamma;
};

/// Gamma of `eval` against `ref`. If the grids differ, `eval` is first resampled
/// onto the reference grid (resample_trilinear). Throws ConfigError for invalid
/// options; InputError when a volume does not match its grid, holds a NaN/Inf
/// value, the reference dose is zero everywhere (nothing to normalise to), or no
/// reference voxel reaches the threshold (a normalisation dose far above the
/// reference maximum).
GammaResult gamma_3d(const Volume<float>& ref, const Volume<float>& eval,
                     const GammaOptions& options);

}  // namespace protondose::compare
