#pragma once
/// \file scattering.h
/// Multiple Coulomb scattering of protons as Fermi–Eyges moments advanced step
/// by step along a ray through heterogeneous material.
///
/// Scattering power T (rad² per mm of path) of a step of material with mass
/// density ρ and radiation length X0 (g/cm²), at kinetic energy E:
///   kFermiRossiHighland:   T = (14.1 MeV / pv)² · ρ / X0
///       the Fermi–Rossi form (Rossi & Greisen, Rev Mod Phys 13:240, 1941)
///       with Highland's E_s = 14.1 MeV (Highland, NIM 129:497, 1975) and
///       without Highland's logarithmic thickness term, which is not additive
///       over steps.
///   kDifferentialMoliere:  T = f_dM(pv, p1v1) · (15.0 MeV / pv)² · ρ / X_S
///       Gottschalk, Med Phys 37:352 (2010), "differential Molière" T_dM:
///       E_s = 15.0 MeV, the scattering length X_S (materials.h; water
///       46.88 g/cm²) and the single-scattering correction
///       f_dM = 0.5244 + 0.1975 lg(1 − (pv/p1v1)²) + 0.2320 lg(pv)
///              − 0.0098 lg(pv) lg(1 − (pv/p1v1)²),
///       pv in MeV, p1v1 = pv at the entrance of the ray.
///   kDifferentialHighland: T = f_dM(pv, p1v1) · (15.0 MeV / pv)² · ρ / X0
///       the form named "Gottschalk's differential Highland (E_s = 15.0 MeV)"
///       in shared/docs/physics-and-method.md: Gottschalk's f_dM and E_s with
///       the radiation length X0 in place of his X_S. It is not a formula of
///       Gottschalk 2010; its T is X_S/X0 ≈ 1.30 times T_dM in water. Kept
///       because the engine was built against it; see
///       docs/physics/multiple-scattering.md.
/// with pv = (E² + 2 E m)/(E + m), m = 938.272 MeV.
/// Fermi–Eyges moments (Eyges, Phys Rev 74:1534, 1948):
///   A0 = ∫T dz', A1 = ∫T (z − z') dz', A2 = ∫T (z − z')² dz';
/// σ_x² of a pencil beam = A2. See docs/physics/multiple-scattering.md.

namespace protondose::physics {

/// Proton rest energy used by the scattering formulas, MeV (CODATA 2018:
/// 938.272 MeV).
inline constexpr double kScatteringProtonRestEnergyMev = 938.272;

/// Momentum times velocity of a proton, pv = (E² + 2Em)/(E + m), MeV.
/// \param kinetic_energy_mev kinetic energy E, MeV (≥ 0).
double proton_pv_mev(double kinetic_energy_mev);

/// Which scattering-power formula advance() uses (see the file comment).
enum class ScatteringPowerModel {
  kFermiRossiHighland,    ///< (14.1 MeV/pv)²/X0, local; the default
  kDifferentialHighland,  ///< f_dM (15.0 MeV/pv)²/X0 (see above), needs the entrance pv
  kDifferentialMoliere,   ///< Gottschalk 2010 T_dM, f_dM (15.0 MeV/pv)²/X_S, needs the entrance pv
};

/// Short stable name of a model ("fermi-rossi-highland", "differential-highland",
/// "differential-moliere").
const char* scattering_power_model_name(ScatteringPowerModel model) noexcept;

/// A validated choice of scattering-power model for one ray. The
/// differential models need the kinetic energy at the entrance of the ray
/// (the p1v1 of Gottschalk 2010); build them with the named constructors.
class ScatteringOptions {
 public:
  /// The default model (kFermiRossiHighland).
  ScatteringOptions() = default;
  /// Fermi–Rossi with Highland's E_s = 14.1 MeV.
  static ScatteringOptions fermi_rossi_highland();
  /// kDifferentialHighland (see the file comment) for a ray entering with this energy.
  /// \throws InputError when incident_energy_mev is not finite or not > 0.
  static ScatteringOptions differential_highland(double incident_energy_mev);
  /// Gottschalk's differential Molière for a ray entering with this energy.
  /// \throws InputError when incident_energy_mev is not finite or not > 0.
  static ScatteringOptions differential_moliere(double incident_energy_mev);
  /// Any model; incident_energy_mev is used (and validated) only for the
  /// differential models.
  static ScatteringOptions make(ScatteringPowerModel model, double incident_energy_mev);

  ScatteringPowerModel model() const noexcept { return model_; }
  /// pv at the entrance of the ray, MeV (0 for kFermiRossiHighland).
  double incident_pv_mev() const noexcept { return incident_pv_mev_; }

 private:
  static ScatteringOptions differential(ScatteringPowerModel model, double incident_energy_mev);
  ScatteringPowerModel model_ = ScatteringPowerModel::kFermiRossiHighland;
  double incident_pv_mev_ = 0.0;
};

/// Scattering power T in rad²/mm of path.
/// \param energy_mev kinetic energy at which the step is evaluated (use the
///        step's mid-point energy), MeV; must be > 0.
/// \param density_g_cm3 mass density of the step, g/cm³ (≥ 0).
/// \param radiation_length_g_cm2 X0 of the step's material, g/cm² (> 0).
/// \param scattering_length_g_cm2 X_S of the step's material, g/cm², used only
///        by kDifferentialMoliere; 0 (the default) means body tissue of this
///        density, scattering_length_g_cm2(density_g_cm3) of materials.h.
/// Inner-loop function: arguments are trusted (validated at the boundaries).
/// The correction f_dM is bounded below by 0: it turns negative only within
/// ~1e-8 relative pv loss of the entrance, where its integral is negligible.
double scattering_power_rad2_per_mm(double energy_mev, double density_g_cm3,
                                    double radiation_length_g_cm2,
                                    const ScatteringOptions& options = {},
                                    double scattering_length_g_cm2 = 0.0);

/// Fermi–Eyges moments of the projected (one transverse axis) angular–spatial
/// distribution of a pencil beam, accumulated from the start of the ray.
struct FermiEygesMoments {
  double a0_rad2 = 0.0;    ///< A0 = ∫T dz': variance of the projected angle, rad²
  double a1_rad_mm = 0.0;  ///< A1 = ∫T (z − z') dz': angle–position covariance, rad·mm
  double a2_mm2 = 0.0;     ///< A2 = ∫T (z − z')² dz': variance of the lateral position, mm²

  /// Lateral σ from scattering, mm: sqrt(A2).
  double sigma_mm() const;
  /// Projected angular σ, rad: sqrt(A0).
  double sigma_theta_rad() const;
  /// A2 after a drift of drift_mm through vacuum (no scattering):
  /// A2 + 2 A1 d + A0 d², mm².
  double variance_after_drift_mm2(double drift_mm) const;
};

/// Moves the moments one step of length step_mm downstream through material
/// of constant scattering power T over the step (exact for constant T):
///   A2' = A2 + 2 A1 Δz + A0 Δz² + T Δz³/3
///   A1' = A1 + A0 Δz + T Δz²/2
///   A0' = A0 + T Δz
/// \param step_mm path length of the step, mm (≥ 0).
/// \param energy_mev kinetic energy at the step's mid-point, MeV (> 0).
/// Other parameters as scattering_power_rad2_per_mm(). Trusted inputs.
FermiEygesMoments advance(const FermiEygesMoments& moments, double step_mm,
                          double density_g_cm3, double radiation_length_g_cm2,
                          double energy_mev, const ScatteringOptions& options = {},
                          double scattering_length_g_cm2 = 0.0);

/// Moves the moments through step_mm of material with zero scattering power
/// (vacuum, or air neglected): the drift part of advance().
FermiEygesMoments drift(const FermiEygesMoments& moments, double step_mm);

}  // namespace protondose::physics
