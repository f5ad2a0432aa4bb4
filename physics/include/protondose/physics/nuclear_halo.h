#pragma once
/// \file nuclear_halo.h
/// The nuclear halo of a proton pencil beam in water as a second, wide
/// Gaussian: at water-equivalent depth w a fraction W(w, E) of the energy
/// deposited at that depth is spread with σ_halo(w, E) instead of the core σ
/// (double-Gaussian pencil beam; da Silva, Ansorge & Jena, Front Oncol 5:281,
/// 2015). Model and provenance: docs/physics/nuclear-halo.md.
///
/// Parameterisation (t = w / R0, R0 = PSTAR CSDA range of E in water, mm):
///   W(w, E)      = κ · w · (1 − b·t),             κ = 4.239e-4 /mm, b = 0.0932
///   σ_halo(w, E) = R0 · (a + c·t) + d,            a = 0.2105, c = −0.1794, d = 7.16 mm
/// W rises from 0 at the surface about linearly with depth, like the fraction
/// of primaries lost to nonelastic nuclear interactions (~1 %/cm, ICRU Report
/// 63); σ_halo shrinks with depth because the widest secondaries come from
/// interactions far upstream. The five parameters were fitted (da Silva et al.
/// 2015's second approach: fit the double Gaussian to Monte Carlo pencil beams
/// in water) to the fractions of the integrated depth dose outside centred
/// squares of 40, 80 and 120 mm in the project's MCsquare reference for the
/// DCPT ProBeam (shared/reference/dcpt-v5-water-idd/idd_lateral_containment.csv,
/// 70–230 MeV at 1/4, 1/2, 3/4 and 1 × the peak depth).
/// It is NOT the Soukup et al. (PMB 50:5089, 2005) or Pedroni et al. (PMB
/// 50:541, 2005) parameterisation.

namespace protondose::physics {

/// The double-Gaussian halo model for one beam energy.
class NuclearHalo {
 public:
  /// Deepest depth the model answers for, as a fraction of the CSDA range
  /// (the engine stops rays at ~1.05 R).
  static constexpr double kMaxDepthOverRange = 1.1;

  /// Energies the model accepts, MeV: the fit covers 70–230 MeV; below and
  /// above it is extrapolated (documented), and at 300 MeV W stays < 0.22.
  static constexpr double kMinEnergyMev = 10.0;
  static constexpr double kMaxEnergyMev = 300.0;

  /// Model for protons of kinetic energy energy_mev at the water surface (the
  /// entrance of the ray).
  /// \throws InputError when the energy is outside [kMinEnergyMev,
  ///         kMaxEnergyMev], naming the energy and the accepted range.
  explicit NuclearHalo(double energy_mev);

  /// Fraction of the energy deposited at WEPL wepl_mm (mm from the surface)
  /// that belongs to the halo Gaussian, in [0, 1).
  /// \throws InputError when wepl_mm is negative, not finite or deeper than
  ///         kMaxDepthOverRange × the CSDA range (names the value and the range).
  double weight_fraction(double wepl_mm) const;
  /// σ of the halo Gaussian (each lateral axis) at WEPL wepl_mm, mm.
  /// \throws InputError as weight_fraction.
  double sigma_mm(double wepl_mm) const;

  /// One-shot forms: NuclearHalo(energy_mev).weight_fraction(wepl_mm) / .sigma_mm(wepl_mm).
  static double weight_fraction(double wepl_mm, double energy_mev);
  static double sigma_mm(double wepl_mm, double energy_mev);

  double energy_mev() const noexcept { return energy_mev_; }
  /// CSDA range in water of energy_mev(), mm (PSTAR).
  double csda_range_mm() const noexcept { return range_mm_; }

 private:
  void check_depth(double wepl_mm) const;
  double energy_mev_ = 0.0;
  double range_mm_ = 0.0;
};

}  // namespace protondose::physics
