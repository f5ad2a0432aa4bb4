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

/// A reference material: name, nominal mass density (g/cm³) and radiation
/// length (g/cm²) computed from its elemental composition by Bragg additivity.
struct ReferenceMaterial {
  std::string name;
  double density_g_cm3;           ///< nominal mass density, g/cm³
  double radiation_length_g_cm2;  ///< X0, g/cm²
};

/// Radiation length of a mixture by Bragg additivity, 1/X0 = Σ w_i / X0_i
/// (PDG Review of Particle Physics, "Passage of particles through matter",
/// radiation-length section), using the PDG elemental X0 values.
/// \param mass_fractions (element symbol, mass fraction) pairs; fractions are
///        normalised to their sum. Supported elements: H C N O Na Mg P S Cl Ar K Ca.
/// \throws InputError for an unknown element, a negative fraction or a zero sum.
double mixture_radiation_length_g_cm2(
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

}  // namespace protondose::physics
