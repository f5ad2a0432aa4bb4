#pragma once
/// \file lateral_profile.h
/// The projected (one-axis) lateral dose profile of a pencil beam as a sum of
/// centred Gaussians, and the "core σ" that a Monte Carlo analysis reports for
/// such a profile: one Gaussian fitted to the voxelised profile within a window
/// of ±2.5 σ around the axis, the window recomputed from the fitted σ until it
/// is stable. That is how the MCsquare reference σ(z) was obtained
/// (shared/reference/README.md, "Lateral spread vs depth": "core single-Gaussian
/// fit to the projected lateral profile (voxel-integrated Gaussian, fit
/// restricted to |u − μ| ≤ 2.5 σ, iterated)", 1 mm voxels, 160 mm box).
///
/// Why it is needed: the fitted core σ is not the σ of the multiple-scattering
/// Gaussian alone. Whatever part of the nuclear component lies inside the fit
/// window widens it (Gottschalk, Cascio, Daartz & Wagner, "On the nuclear halo
/// of a proton pencil beam stopping in water", Phys Med Biol 60:5627, 2015,
/// arXiv:1412.0045: core, halo and aura overlap). Comparing a model's core σ with a Monte Carlo core fit therefore
/// means fitting the model's whole profile the same way
/// (docs/validation/lateral-spread.md).
///
/// The profile of a spot with a double-Gaussian nuclear halo (da Silva, Ansorge
/// & Jena, Front Oncol 5:281, 2015; nuclear_halo.h) at water-equivalent depth w:
///   (1 − W(w)) · G(σ_core) + W(w) · G(σ_halo(w, σ_core)),
/// G a normalised centred Gaussian, W the halo's share of the energy deposited
/// at w (spot_lateral_profile()). Model page: docs/physics/lateral-profile.md.

#include <vector>

namespace protondose::physics {

class NuclearHalo;

/// One centred Gaussian of a projected lateral profile.
struct LateralGaussian {
  double weight = 0.0;    ///< share of the profile's integral (≥ 0; the weights need not sum to 1)
  double sigma_mm = 0.0;  ///< σ along the axis, mm (> 0)
};

/// How the voxels inside the window are weighted in the least-squares fit.
enum class CoreFitWeighting {
  kUniform,      ///< ordinary least squares: every voxel counts alike
  kInverseDose,  ///< each voxel weighted by 1/(its dose), as for Poisson-distributed counts
};

/// Short stable name ("uniform", "inverse-dose").
const char* core_fit_weighting_name(CoreFitWeighting weighting) noexcept;

/// A projected lateral profile on a row of equal voxels: dose[i] is the
/// profile integrated over the voxel centred at first_centre_mm + i·voxel_mm.
/// The beam axis is at 0 mm.
struct VoxelProfile {
  double voxel_mm = 1.0;         ///< voxel width, mm (> 0)
  double first_centre_mm = 0.0;  ///< centre of voxel 0, mm
  std::vector<double> dose;      ///< voxel integrals (≥ 0), any unit
};

/// The voxel grid of the MCsquare reference's σ tables (shared/reference/README.md):
/// 1 mm voxels over a 160 mm box centred on the spot, a voxel edge on the axis.
inline constexpr double kReferenceVoxelMm = 1.0;
inline constexpr double kReferenceHalfWidthMm = 80.0;

/// The voxelised sum of `components` on voxels of voxel_mm from −half_width_mm
/// to +half_width_mm (voxel edges on multiples of voxel_mm, so one on the axis).
/// \throws InputError when `components` is empty, a weight is negative or not
///         finite, all weights are 0, a σ is not finite or not > 0, voxel_mm is
///         not finite or not > 0, or half_width_mm < voxel_mm.
VoxelProfile voxelise(const std::vector<LateralGaussian>& components, double voxel_mm = kReferenceVoxelMm,
                      double half_width_mm = kReferenceHalfWidthMm);

/// The fit of a Monte Carlo core-σ analysis: the reference's window of ±2.5 σ.
/// The README does not say how voxels are weighted; kUniform is the plain
/// least-squares fit.
struct CoreFitOptions {
  double window_sigmas = 2.5;  ///< voxels whose centre lies within ±window_sigmas·σ are fitted (> 0)
  CoreFitWeighting weighting = CoreFitWeighting::kUniform;
};

/// σ (mm) of the voxel-integrated Gaussian centred on the axis
///   A · [Φ((u + Δ/2)/σ) − Φ((u − Δ/2)/σ)]   (Φ the standard normal CDF, Δ = voxel_mm)
/// least-squares fitted (A and σ free) to `profile` over the voxels whose
/// centre u lies within ±window_sigmas·σ. The first window is that of the rms
/// of the whole profile; the fit is repeated with the window of the fitted σ
/// until the set of fitted voxels no longer changes; if it alternates between
/// sets (the window's edge falls on a voxel centre), the result is the mean of
/// the σ fitted in the cycle (they differ by ~1e-4 σ). The centre is not fitted:
/// the profile is taken as centred on the axis (the reference's fitted centres
/// lie within 0.03 mm of it).
/// \throws InputError when the profile has no voxel, a dose is negative or not
///         finite, all doses are 0, voxel_mm or first_centre_mm is not finite or
///         voxel_mm ≤ 0, or window_sigmas is not finite or ≤ 0 (each message
///         names the value and the accepted range).
/// \throws NumericalError when the window does not settle within 100 refits, or
///         fewer than 3 voxels fall inside it (a σ below about a voxel).
double fitted_core_sigma_mm(const VoxelProfile& profile, const CoreFitOptions& options = {});

/// fitted_core_sigma_mm(voxelise(components), options): the core σ the
/// reference's analysis would report for a profile that is this sum of Gaussians.
/// \throws as voxelise() and fitted_core_sigma_mm(VoxelProfile).
double fitted_core_sigma_mm(const std::vector<LateralGaussian>& components, const CoreFitOptions& options = {});

/// The two Gaussians of a spot's projected profile at WEPL wepl_mm (mm) in
/// water, for a core of σ core_sigma_mm there (in-air optics and multiple
/// scattering, mm): {1 − W, σ_core} and {W, σ_halo}, with W =
/// halo.weight_fraction(wepl_mm) and σ_halo = halo.sigma_with_core_mm(wepl_mm,
/// core_sigma_mm) (kSoukup2005: sqrt(σ_core² + σ_N²), the published composition).
/// \throws InputError as NuclearHalo::weight_fraction and sigma_with_core_mm.
std::vector<LateralGaussian> spot_lateral_profile(const NuclearHalo& halo, double wepl_mm, double core_sigma_mm);

}  // namespace protondose::physics
