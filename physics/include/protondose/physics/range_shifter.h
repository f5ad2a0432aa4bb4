#pragma once
/// \file range_shifter.h
/// A range shifter (a slab of plastic in the nozzle): it removes energy equal
/// to its water-equivalent thickness (WET) and widens the spot by multiple
/// Coulomb scattering in the slab, which grows over the air gap to the patient.
/// See docs/physics/range-shifter.md.

#include <string>

#include "protondose/physics/scattering.h"

namespace protondose::physics {

/// Material of a range shifter.
struct RangeShifterMaterial {
  std::string name;
  double density_g_cm3 = 0.0;           ///< mass density, g/cm³ (> 0)
  double radiation_length_g_cm2 = 0.0;  ///< X0, g/cm² (> 0)
  double scattering_length_g_cm2 = 0.0; ///< X_S (Gottschalk 2010), g/cm² (> 0)
  /// Stopping power relative to water (dimensionless, > 0): physical
  /// thickness = WET / relative_stopping_power.
  double relative_stopping_power = 0.0;
};

/// PMMA: ρ = 1.19 g/cm³, X0 and X_S from its composition (materials.h,
/// 40.55 and 53.76 g/cm²),
/// relative stopping power 1.1747 = 34.3 mm WET / 29.2 mm, the PMMA/water
/// ratio MCsquare applies at 100 MeV (shared/reference/README.md, RS_3CM).
RangeShifterMaterial pmma_range_shifter_material();
/// Polycarbonate (Lexan): ρ = 1.20 g/cm³, X0 and X_S from its composition
/// (41.51 and 55.05 g/cm²),
/// relative stopping power 1.143: Bethe's formula at 100 MeV with the PDG
/// mean excitation energies and Z/A (polycarbonate 73.1 eV, 0.52697; water
/// 75.0 eV, 0.55509), as computed in range_shifter.cpp.
RangeShifterMaterial polycarbonate_range_shifter_material();

/// A range shifter: identifier, WET and material.
struct RangeShifter {
  std::string id;                             ///< DICOM RangeShifterID, for messages
  double water_equivalent_thickness_mm = 0.0; ///< WET, mm (> 0)
  RangeShifterMaterial material;

  /// Physical thickness along the beam, mm: WET / relative stopping power.
  double physical_thickness_mm() const;
};

/// Validates a range shifter.
/// \throws InputError naming the id and the value for a non-finite or
///         non-positive WET, density, X0, X_S or relative stopping power.
void validate(const RangeShifter& range_shifter);

/// Mean kinetic energy (MeV) behind the shifter: residual_energy_mev(E, WET)
/// (PSTAR, range_energy.h).
/// \throws InputError when the shifter stops the beam (WET ≥ CSDA range), naming
///         the id, the energy and both lengths; or as validate() / residual_energy_mev.
double energy_after_range_shifter_mev(const RangeShifter& range_shifter, double energy_in_mev);

/// Fermi–Eyges moments at the downstream face of the shifter for a pencil
/// entering with no angular spread, integrated in steps of at most 0.5 mm with
/// the mid-step energy from the WET traversed so far.
/// \throws as energy_after_range_shifter_mev.
FermiEygesMoments range_shifter_exit_moments(const RangeShifter& range_shifter, double energy_in_mev,
                                             const ScatteringOptions& options = {});

/// Variance added to the spot by the shifter at a plane drift_mm downstream of
/// its downstream face (air gap; air scattering neglected, as in MCsquare):
/// A2 + 2 A1 d + A0 d², mm². Add it in quadrature to the in-air spot variance.
/// \throws InputError for a negative or non-finite drift_mm (naming it), or as
///         energy_after_range_shifter_mev.
double range_shifter_added_variance_mm2(const RangeShifter& range_shifter, double energy_in_mev,
                                        double drift_mm, const ScatteringOptions& options = {});

}  // namespace protondose::physics
