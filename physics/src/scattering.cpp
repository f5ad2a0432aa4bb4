#include "protondose/physics/scattering.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/physics/materials.h"

namespace protondose::physics {
namespace {

// Highland's constant for the projected-angle width (Highland, NIM 129:497, 1975).
constexpr double kHighlandEsMev = 14.1;
// Gottschalk's E_s for the differential Molière formula (Med Phys 37:352, 2010).
constexpr double kDifferentialEsMev = 15.0;
// X0 is in g/cm², path lengths in mm: ρ[g/cm³]·Δs[mm] / X0[g/cm²] needs 1/10.
constexpr double kMmPerCm = 10.0;

// Gottschalk 2010: single-scattering correction f_dM of the differential
// Molière formula; pv and p1v1 in MeV.
double differential_moliere_factor(double pv_mev, double incident_pv_mev) {
  const double ratio = pv_mev / incident_pv_mev;
  const double one_minus_ratio2 = 1.0 - ratio * ratio;
  // At the very entrance (pv = p1v1) the logarithm diverges to −∞; the factor
  // is integrable there and is bounded below by 0 (see scattering.h).
  if (!(one_minus_ratio2 > 0.0)) return 0.0;
  const double lg_deficit = std::log10(one_minus_ratio2);
  const double lg_pv = std::log10(pv_mev);
  const double f = 0.5244 + 0.1975 * lg_deficit + 0.2320 * lg_pv - 0.0098 * lg_pv * lg_deficit;
  return std::max(f, 0.0);
}

}  // namespace

double proton_pv_mev(double kinetic_energy_mev) {
  const double m = kScatteringProtonRestEnergyMev;
  return (kinetic_energy_mev * kinetic_energy_mev + 2.0 * kinetic_energy_mev * m) /
         (kinetic_energy_mev + m);
}

const char* scattering_power_model_name(ScatteringPowerModel model) noexcept {
  switch (model) {
    case ScatteringPowerModel::kFermiRossiHighland: return "fermi-rossi-highland";
    case ScatteringPowerModel::kDifferentialHighland: return "differential-highland";
    case ScatteringPowerModel::kDifferentialMoliere: return "differential-moliere";
  }
  return "unknown";
}

ScatteringOptions ScatteringOptions::fermi_rossi_highland() { return ScatteringOptions{}; }

ScatteringOptions ScatteringOptions::differential(ScatteringPowerModel model, double incident_energy_mev) {
  if (!std::isfinite(incident_energy_mev) || !(incident_energy_mev > 0.0)) {
    std::ostringstream msg;
    msg << scattering_power_model_name(model) << " scattering: incident kinetic energy " << incident_energy_mev
        << " MeV is not valid; expected a finite energy > 0 MeV";
    throw InputError(msg.str());
  }
  ScatteringOptions options;
  options.model_ = model;
  options.incident_pv_mev_ = proton_pv_mev(incident_energy_mev);
  return options;
}

ScatteringOptions ScatteringOptions::differential_highland(double incident_energy_mev) {
  return differential(ScatteringPowerModel::kDifferentialHighland, incident_energy_mev);
}

ScatteringOptions ScatteringOptions::differential_moliere(double incident_energy_mev) {
  return differential(ScatteringPowerModel::kDifferentialMoliere, incident_energy_mev);
}

ScatteringOptions ScatteringOptions::make(ScatteringPowerModel model, double incident_energy_mev) {
  if (model == ScatteringPowerModel::kFermiRossiHighland) return fermi_rossi_highland();
  return differential(model, incident_energy_mev);
}

double scattering_power_rad2_per_mm(double energy_mev, double density_g_cm3,
                                    double radiation_length_g_cm2, const ScatteringOptions& options,
                                    double scattering_length_g_cm2) {
  const double pv = proton_pv_mev(energy_mev);
  switch (options.model()) {
    case ScatteringPowerModel::kFermiRossiHighland: {
      const double es_over_pv = kHighlandEsMev / pv;
      return es_over_pv * es_over_pv * density_g_cm3 / (radiation_length_g_cm2 * kMmPerCm);
    }
    case ScatteringPowerModel::kDifferentialHighland: {
      const double es_over_pv = kDifferentialEsMev / pv;
      return differential_moliere_factor(pv, options.incident_pv_mev()) * es_over_pv * es_over_pv *
             density_g_cm3 / (radiation_length_g_cm2 * kMmPerCm);
    }
    case ScatteringPowerModel::kDifferentialMoliere: {
      if (!(density_g_cm3 > 0.0)) return 0.0;  // vacuum: no scattering, and no tissue to look up
      const double xs = scattering_length_g_cm2 > 0.0 ? scattering_length_g_cm2
                                                      : physics::scattering_length_g_cm2(density_g_cm3);
      const double es_over_pv = kDifferentialEsMev / pv;
      return differential_moliere_factor(pv, options.incident_pv_mev()) * es_over_pv * es_over_pv *
             density_g_cm3 / (xs * kMmPerCm);
    }
  }
  return 0.0;
}

double FermiEygesMoments::sigma_mm() const { return std::sqrt(std::max(a2_mm2, 0.0)); }

double FermiEygesMoments::sigma_theta_rad() const { return std::sqrt(std::max(a0_rad2, 0.0)); }

double FermiEygesMoments::variance_after_drift_mm2(double drift_mm) const {
  return a2_mm2 + 2.0 * a1_rad_mm * drift_mm + a0_rad2 * drift_mm * drift_mm;
}

FermiEygesMoments drift(const FermiEygesMoments& m, double step_mm) {
  return {m.a0_rad2, m.a1_rad_mm + m.a0_rad2 * step_mm, m.variance_after_drift_mm2(step_mm)};
}

FermiEygesMoments advance(const FermiEygesMoments& m, double step_mm, double density_g_cm3,
                          double radiation_length_g_cm2, double energy_mev,
                          const ScatteringOptions& options, double scattering_length_g_cm2) {
  // With T constant over [z, z + Δz], the integrals over the new interval give
  // ∫T dz' = TΔz, ∫T(z+Δz−z')dz' = TΔz²/2, ∫T(z+Δz−z')²dz' = TΔz³/3, and the
  // old moments are carried to the new plane by (z − z') → (z − z') + Δz.
  const double t = scattering_power_rad2_per_mm(energy_mev, density_g_cm3, radiation_length_g_cm2, options,
                                                scattering_length_g_cm2);
  const double dz = step_mm;
  FermiEygesMoments out = drift(m, dz);
  out.a0_rad2 += t * dz;
  out.a1_rad_mm += t * dz * dz / 2.0;
  out.a2_mm2 += t * dz * dz * dz / 3.0;
  return out;
}

}  // namespace protondose::physics
