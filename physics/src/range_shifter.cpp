#include "protondose/physics/range_shifter.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/physics/materials.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {
namespace {

constexpr double kElectronRestEnergyMev = 0.51099895;  // CODATA 2018

// Bethe stopping number L = ½ ln(2 m c² β²γ² T_max / I²) − β² (PDG review,
// "Passage of particles through matter", mean rate of energy loss; no shell or
// density corrections, which cancel to < 0.1 % in a ratio at 100 MeV).
double bethe_stopping_number(double energy_mev, double mean_excitation_ev) {
  const double m = kScatteringProtonRestEnergyMev;
  const double gamma = 1.0 + energy_mev / m;
  const double beta2 = 1.0 - 1.0 / (gamma * gamma);
  const double me = kElectronRestEnergyMev;
  const double ratio = me / m;
  const double t_max = 2.0 * me * beta2 * gamma * gamma / (1.0 + 2.0 * gamma * ratio + ratio * ratio);
  const double i_mev = mean_excitation_ev * 1e-6;
  return 0.5 * std::log(2.0 * me * beta2 * gamma * gamma * t_max / (i_mev * i_mev)) - beta2;
}

// Stopping power relative to water at 100 MeV from Bethe's formula:
// ρ (Z/A) L(I) / [(Z/A)_w L(I_w)], water Z/A = 0.55509, I = 75.0 eV (PDG).
double bethe_rsp_at_100_mev(double density_g_cm3, double z_over_a, double mean_excitation_ev) {
  constexpr double kWaterZOverA = 0.55509;
  constexpr double kWaterMeanExcitationEv = 75.0;
  return density_g_cm3 * z_over_a * bethe_stopping_number(100.0, mean_excitation_ev) /
         (kWaterZOverA * bethe_stopping_number(100.0, kWaterMeanExcitationEv));
}

void require_positive(const RangeShifter& rs, const char* what, double value, const char* unit) {
  if (!std::isfinite(value) || !(value > 0.0)) {
    std::ostringstream msg;
    msg << "range shifter '" << rs.id << "': " << what << " " << value << " " << unit
        << " is not valid; expected a finite value > 0";
    throw InputError(msg.str());
  }
}

}  // namespace

RangeShifterMaterial pmma_range_shifter_material() {
  const ReferenceMaterial m = pmma();
  return {m.name, m.density_g_cm3, m.radiation_length_g_cm2, m.scattering_length_g_cm2, 34.3 / 29.2};
}

RangeShifterMaterial polycarbonate_range_shifter_material() {
  const ReferenceMaterial m = polycarbonate();
  return {m.name, m.density_g_cm3, m.radiation_length_g_cm2, m.scattering_length_g_cm2,
          bethe_rsp_at_100_mev(m.density_g_cm3, 0.52697, 73.1)};
}

double RangeShifter::physical_thickness_mm() const {
  return water_equivalent_thickness_mm / material.relative_stopping_power;
}

void validate(const RangeShifter& rs) {
  require_positive(rs, "water-equivalent thickness", rs.water_equivalent_thickness_mm, "mm");
  require_positive(rs, "material density", rs.material.density_g_cm3, "g/cm3");
  require_positive(rs, "radiation length", rs.material.radiation_length_g_cm2, "g/cm2");
  require_positive(rs, "scattering length", rs.material.scattering_length_g_cm2, "g/cm2");
  require_positive(rs, "relative stopping power", rs.material.relative_stopping_power, "");
}

double energy_after_range_shifter_mev(const RangeShifter& rs, double energy_in_mev) {
  validate(rs);
  const double range_mm = csda_range_mm(energy_in_mev);
  if (rs.water_equivalent_thickness_mm >= range_mm) {
    std::ostringstream msg;
    msg << "range shifter '" << rs.id << "': its water-equivalent thickness "
        << rs.water_equivalent_thickness_mm << " mm stops a " << energy_in_mev
        << " MeV proton (CSDA range " << range_mm << " mm in water)";
    throw InputError(msg.str());
  }
  return residual_energy_mev(energy_in_mev, rs.water_equivalent_thickness_mm);
}

FermiEygesMoments range_shifter_exit_moments(const RangeShifter& rs, double energy_in_mev,
                                             const ScatteringOptions& options) {
  (void)energy_after_range_shifter_mev(rs, energy_in_mev);  // validates and checks the beam gets through
  const double thickness_mm = rs.physical_thickness_mm();
  const int steps = std::max(1, static_cast<int>(std::ceil(thickness_mm / 0.5)));
  const double step_mm = thickness_mm / steps;
  const double wet_per_mm = rs.material.relative_stopping_power;
  FermiEygesMoments moments;
  for (int i = 0; i < steps; ++i) {
    const double e_mid = residual_energy_mev(energy_in_mev, (i + 0.5) * step_mm * wet_per_mm);
    moments = advance(moments, step_mm, rs.material.density_g_cm3, rs.material.radiation_length_g_cm2,
                      e_mid, options, rs.material.scattering_length_g_cm2);
  }
  return moments;
}

double range_shifter_added_variance_mm2(const RangeShifter& rs, double energy_in_mev, double drift_mm,
                                        const ScatteringOptions& options) {
  if (!std::isfinite(drift_mm) || drift_mm < 0.0) {
    std::ostringstream msg;
    msg << "range shifter '" << rs.id << "': distance " << drift_mm
        << " mm from its downstream face to the plane is not valid; expected a finite value >= 0 mm";
    throw InputError(msg.str());
  }
  return range_shifter_exit_moments(rs, energy_in_mev, options).variance_after_drift_mm2(drift_mm);
}

}  // namespace protondose::physics
