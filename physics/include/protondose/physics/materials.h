#pragma once
/// \file materials.h
/// Radiation lengths for multiple-Coulomb-scattering calculations: elemental
/// values, Bragg-additive mixtures, reference tissues, and X0 as a function of
/// mass density for CT voxels. See docs/physics/multiple-scattering.md.

#include <string>
#include <utility>
#include <vector>

namespace protondose::physics {

/// Radiation length of liquid water, g/cm² (PDG, "Atomic and nuclear
/// properties of materials": water, liquid, X0 = 36.08 g/cm²).
inline constexpr double kWaterRadiationLengthGCm2 = 36.08;

/// Scattering length of liquid water, g/cm² (Gottschalk, Med Phys 37:352,
/// 2010: X_S = 46.88 g/cm²; mixture_scattering_length_g_cm2 reproduces it).
inline constexpr double kWaterScatteringLengthGCm2 = 46.88;

/// A reference material: name, nominal mass density (g/cm³), radiation length
/// and scattering length (g/cm²) computed from its elemental composition.
struct ReferenceMaterial {
  std::string name;
  double density_g_cm3;           ///< nominal mass density, g/cm³
  double radiation_length_g_cm2;  ///< X0, g/cm²
  double scattering_length_g_cm2; ///< X_S (Gottschalk 2010), g/cm²
};

/// Radiation length of a mixture by Bragg additivity, 1/X0 = Σ w_i / X0_i
/// (PDG Review of Particle Physics, "Passage of particles through matter",
/// radiation-length section), using the PDG elemental X0 values.
/// \param mass_fractions (element symbol, mass fraction) pairs; fractions are
///        normalised to their sum. Supported elements: H C N O Na Mg P S Cl Ar K Ca.
/// \throws InputError for an unknown element, a negative fraction or a zero sum.
double mixture_radiation_length_g_cm2(
    const std::vector<std::pair<std::string, double>>& mass_fractions);

/// Scattering length X_S of a mixture (Gottschalk, Med Phys 37:352, 2010,
/// eq. for X_S): 1/X_S = α N_A r_e² Σ w_i (Z_i²/A_i) [2 ln(33219 (A_i Z_i)^(−1/3)) − 1].
/// Same arguments and errors as mixture_radiation_length_g_cm2.
double mixture_scattering_length_g_cm2(
    const std::vector<std::pair<std::string, double>>& mass_fractions);

/// The tissue anchors used by radiation_length_g_cm2(density), in increasing
/// density: dry air, lung, adipose tissue, water, skeletal muscle, cortical
/// bone (compositions: Woodard & White, Br J Radiol 59:1209, 1986 / ICRU
/// Report 46; air and water: PDG). X0 computed with mixture_radiation_length_g_cm2.
const std::vector<ReferenceMaterial>& reference_tissues();

/// PMMA (C5H8O2, 1.19 g/cm³), the default range-shifter material.
ReferenceMaterial pmma();
/// Polycarbonate / Lexan (C16H14O3, 1.20 g/cm³).
ReferenceMaterial polycarbonate();

/// Radiation length (g/cm²) of body tissue of the given mass density:
/// piecewise linear in density between the reference_tissues() anchors. A
/// density below dry air takes air's X0; above cortical bone, cortical bone's
/// (a documented material assignment: denser voxels are treated as bone).
/// \throws InputError when density_g_cm3 is not finite or not > 0.
double radiation_length_g_cm2(double density_g_cm3);

/// Scattering length (g/cm²) of body tissue of the given mass density, by the
/// same interpolation and end assignments as radiation_length_g_cm2(density).
/// \throws InputError when density_g_cm3 is not finite or not > 0.
double scattering_length_g_cm2(double density_g_cm3);

}  // namespace protondose::physics
