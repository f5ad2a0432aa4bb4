#pragma once
/// \file nuclear_halo.h
/// The nuclear halo of a proton pencil beam in water as a second, wide
/// Gaussian: at water-equivalent depth w a fraction W(w, E) of the energy
/// deposited at that depth is spread with σ_halo(w, E) instead of the core σ
/// (double-Gaussian pencil beam; da Silva, Ansorge & Jena, Front Oncol 5:281,
/// 2015). Models and provenance: docs/physics/nuclear-halo.md.
///
/// Two parameterisations, chosen by HaloModel:
///
/// kSoukup2005 — the published parameterisation of Soukup, Fippel & Alber,
/// "A pencil beam algorithm for intensity modulated proton therapy derived from
/// Monte Carlo simulations", Phys Med Biol 50:5089–5104 (2005). The paper was
/// not available to this project: the formulas are those of two independent
/// implementations that attribute them to it (below), checked against each
/// other. With z the WEPL and R the range, both in mm:
///   W(z)   = 0.052 ln(1.13 + z / (11.2 − 0.023 R))
///            + 0.35 (0.0017 R² − R) / ((R + 3)² − z²) − 1.61e-9 z (R + 3)²
///   σ_N(z) = 2.85 + 0.0014 R ln(z + 3) + 0.06 z − 7.4e-5 z² − 0.22 R / (z − R − 5)²   [mm]
/// σ_N is the width the nuclear component adds to the core in quadrature:
///   σ_halo² = σ_core² + σ_N²,
/// as in both implementations: da Silva et al. 2015 (their GPU code's Soukup
/// table, reproduced by these formulas to 4 significant digits) and
/// Bhattacharya et al., J Appl Clin Med Phys 26:e70093 (2025) (DoseCUDA). Choices of this project (documented
/// in the docs page): R = the PSTAR CSDA range of E (≈ R80); W and σ_N are
/// held at their value at z = R for z > R (both formulas have poles just beyond
/// R, at z = R + 3 and R + 5 mm); W < 0 (within the first millimetre at the
/// lowest energies) is 0.
///
/// kMcsquareFit (the default, kDefaultHaloModel) — the earlier model of this
/// project: W = κ w (1 − b t), σ_halo = R0 (a + c t) + d (t = w/R0), five
/// parameters fitted to the
/// containment fractions of the project's MCsquare reference
/// (shared/reference/dcpt-v5-water-idd/idd_lateral_containment.csv). Not a
/// published parameterisation; σ_halo is the total halo width.

#include <vector>

namespace protondose::physics {

/// Which halo parameterisation a NuclearHalo uses (see the file comment).
enum class HaloModel {
  kSoukup2005,   ///< Soukup, Fippel & Alber, PMB 50:5089 (2005), published
  kMcsquareFit,  ///< fitted to the project's MCsquare containment fractions; the default
};

/// The halo model used when none is named, and so the one the engine uses.
/// kMcsquareFit: with kSoukup2005 the engine misses the water_dcpt regression
/// (on-axis plateau +2.2 % against the Monte Carlo, limit 2 %); see
/// docs/physics/nuclear-halo.md.
inline constexpr HaloModel kDefaultHaloModel = HaloModel::kMcsquareFit;

/// Short stable name of a model ("soukup-2005", "mcsquare-fit").
const char* halo_model_name(HaloModel model) noexcept;

/// Soukup et al. (2005) halo weight W(z, R) as transcribed above, without this
/// project's clamping (W may be < 0 just below the surface at low energy, and
/// has a pole at z = R + 3 mm). depth_mm = z, range_mm = R, both mm.
/// Inner-loop helper: arguments are trusted.
double soukup_halo_weight(double depth_mm, double range_mm);

/// Soukup et al. (2005) added halo width σ_N(z, R), mm, as transcribed above
/// (pole at z = R + 5 mm). Arguments as soukup_halo_weight.
double soukup_halo_added_sigma_mm(double depth_mm, double range_mm);

/// The double-Gaussian halo model for one beam energy.
class NuclearHalo {
 public:
  /// Deepest depth the model answers for, as a fraction of the CSDA range
  /// (the engine stops rays at ~1.05 R).
  static constexpr double kMaxDepthOverRange = 1.1;

  /// Energies the models accept, MeV. Both parameterisations were made for
  /// therapy beams (kMcsquareFit: fitted at 70–230 MeV); outside 70–230 MeV
  /// they are extrapolations (docs/physics/nuclear-halo.md). kSoukup2005 stops
  /// at kSoukupMaxEnergyMev: its weight term 0.052 ln(1.13 + z/(11.2 − 0.023 R))
  /// grows without bound as R approaches 487 mm (≈ 290 MeV) and is undefined
  /// beyond; at 250 MeV its maximum weight is 0.18 (230 MeV: 0.18).
  static constexpr double kMinEnergyMev = 10.0;
  static constexpr double kMaxEnergyMev = 300.0;
  static constexpr double kSoukupMaxEnergyMev = 250.0;

  /// Highest energy a model accepts, MeV (kSoukupMaxEnergyMev or kMaxEnergyMev).
  static double max_energy_mev(HaloModel model) noexcept;

  /// Model for protons of kinetic energy energy_mev at the water surface (the
  /// entrance of the ray).
  /// \throws InputError when the energy is outside [kMinEnergyMev,
  ///         max_energy_mev(model)], naming the energy, the model and the
  ///         accepted range.
  explicit NuclearHalo(double energy_mev, HaloModel model = kDefaultHaloModel);

  /// Fraction of the energy deposited at WEPL wepl_mm (mm from the surface)
  /// that belongs to the halo Gaussian, in [0, 1).
  /// \throws InputError when wepl_mm is negative, not finite or deeper than
  ///         kMaxDepthOverRange × the CSDA range (names the value and the range).
  double weight_fraction(double wepl_mm) const;

  /// Total σ of the halo Gaussian (each lateral axis) at WEPL wepl_mm, mm,
  /// for a pencil of zero width at the surface:
  ///   kSoukup2005:  sqrt(A2(w) + σ_N(w)²), A2 = Fermi–Eyges variance of a
  ///                 zero-width pencil in water (scattering.h default model);
  ///   kMcsquareFit: the fitted total width.
  /// For a beam with a finite core use sigma_with_core_mm().
  /// \throws InputError as weight_fraction.
  double sigma_mm(double wepl_mm) const;

  /// Total σ of the halo Gaussian at WEPL wepl_mm for a beam whose core σ
  /// there is core_sigma_mm (in-air optics and scattering), mm:
  ///   kSoukup2005:  sqrt(core_sigma_mm² + σ_N(w)²) (the published composition);
  ///   kMcsquareFit: the fitted total width (core_sigma_mm is not used).
  /// \throws InputError as weight_fraction, or when core_sigma_mm is negative
  ///         or not finite.
  double sigma_with_core_mm(double wepl_mm, double core_sigma_mm) const;

  /// The width the nuclear component adds to the core in quadrature, σ_N, mm
  /// (kSoukup2005; for kMcsquareFit, which has no such term, 0).
  /// \throws InputError as weight_fraction.
  double added_sigma_mm(double wepl_mm) const;

  /// One-shot forms with the default model:
  /// NuclearHalo(energy_mev).weight_fraction(wepl_mm) / .sigma_mm(wepl_mm).
  static double weight_fraction(double wepl_mm, double energy_mev);
  static double sigma_mm(double wepl_mm, double energy_mev);

  HaloModel model() const noexcept { return model_; }
  double energy_mev() const noexcept { return energy_mev_; }
  /// CSDA range in water of energy_mev(), mm (PSTAR); the R of the formulas.
  double csda_range_mm() const noexcept { return range_mm_; }

 private:
  void check_depth(double wepl_mm) const;
  /// A2 of a zero-width pencil in water at wepl_mm (interpolated), mm².
  double pencil_variance_mm2(double wepl_mm) const;
  HaloModel model_ = kDefaultHaloModel;
  double energy_mev_ = 0.0;
  double range_mm_ = 0.0;
  double pencil_step_mm_ = 0.0;
  std::vector<double> pencil_a2_mm2_;  ///< A2 at k × pencil_step_mm_, k = 0…
};

}  // namespace protondose::physics
