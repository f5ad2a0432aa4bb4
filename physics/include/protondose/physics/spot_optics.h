#pragma once
/// \file spot_optics.h
/// Pencil-beam optics in air: the emittance (Gaussian phase-space) model per
/// lateral axis and the policy for DICOM ScanningSpotSize (docs/physics/spot-optics.md).
///
/// At the optics reference plane (a distance L upstream of the isocentre) the
/// beam has, per axis, spatial width σ0 (mm), angular width σθ (rad) and
/// position–angle correlation ρ. Drifting a distance s (mm) downstream of that
/// plane in vacuum-like air (no scattering, as in MCsquare's transport to the
/// phantom):
///
///   σ²(s) = σ0² + 2ρ·σ0·σθ·s + σθ²·s²
///
/// (the Fermi–Eyges / Twiss drift of the second moments). At the isocentre s = L.

namespace protondose::physics {

/// A lateral axis of the beam: IEC 61217 gantry X or Y (DICOM spot X/Y).
enum class Axis { kX, kY };

/// FWHM of a Gaussian divided by its σ: 2·sqrt(2·ln 2).
inline constexpr double kFwhmPerSigma = 2.3548200450309493;

/// Phase-space parameters of one axis at the optics reference plane.
struct AxisEmittance {
  double sigma_mm = 0.0;         ///< spatial σ0 at the reference plane (mm, > 0)
  double sigma_theta_rad = 0.0;  ///< angular σθ (rad, ≥ 0)
  double correlation = 0.0;      ///< position–angle correlation ρ (dimensionless, −1 < ρ < 1)
};

/// How the spot size at the isocentre is chosen.
enum class SpotSizePolicy {
  /// The beam model's emittance as it is (the plan's ScanningSpotSize is ignored).
  kBeamModel,
  /// The plan's ScanningSpotSize (FWHM in air at the isocentre, mm) overrides:
  /// σ0 is rescaled so that σ at the isocentre equals FWHM / kFwhmPerSigma,
  /// keeping σθ and ρ (so the in-air variation with z keeps the model's shape).
  /// Logged once per process when first applied.
  kPlanSpotSizeAtIsocentre,
};

/// Short name of a policy ("beam-model", "plan-spot-size-at-isocentre").
const char* spot_size_policy_name(SpotSizePolicy policy) noexcept;

/// In-air σ (mm) at distance `s_from_reference_plane_mm` (mm, positive
/// downstream) from the reference plane: sqrt(σ0² + 2ρσ0σθ·s + σθ²·s²).
/// Throws NumericalError if the variance is negative (|ρ| > 1 input).
double sigma_in_air_mm(const AxisEmittance& emittance, double s_from_reference_plane_mm);

/// In-air σ (mm) at `z_from_isocentre_mm` (mm, positive downstream of the
/// isocentre) for a reference plane `reference_plane_upstream_of_isocentre_mm`
/// (mm, > 0) upstream of the isocentre: sigma_in_air_mm(e, L + z).
double sigma_in_air_at_z_from_isocentre_mm(const AxisEmittance& emittance,
                                           double reference_plane_upstream_of_isocentre_mm,
                                           double z_from_isocentre_mm);

/// The emittance with σ0 rescaled (σθ, ρ kept) so that the in-air σ at the
/// isocentre (s = L = `reference_plane_upstream_of_isocentre_mm`) equals
/// `sigma_at_isocentre_mm`: σ0' = −ρσθL + sqrt(σ_iso² − (1 − ρ²)σθ²L²).
/// Throws InputError (with the requested σ and the smallest one reachable,
/// sqrt(1 − ρ²)·σθ·L) when no σ0' > 0 gives the requested size.
AxisEmittance with_sigma_at_isocentre(const AxisEmittance& emittance,
                                      double reference_plane_upstream_of_isocentre_mm,
                                      double sigma_at_isocentre_mm);

}  // namespace protondose::physics
