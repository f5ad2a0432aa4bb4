#include "protondose/physics/nuclear_halo.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {
namespace {

// Parameters of nuclear_halo.h / docs/physics/nuclear-halo.md, fitted to the
// MCsquare containment fractions of shared/reference/dcpt-v5-water-idd.
constexpr double kWeightPerMm = 4.239e-4;     // κ, 1/mm
constexpr double kWeightDepthDecline = 0.0932;  // b
constexpr double kSigmaRangeFraction = 0.2105;  // a
constexpr double kSigmaRangeSlope = -0.1794;    // c
constexpr double kSigmaOffsetMm = 7.16;         // d, mm

double checked_energy(double energy_mev) {
  if (!std::isfinite(energy_mev) || energy_mev < NuclearHalo::kMinEnergyMev ||
      energy_mev > NuclearHalo::kMaxEnergyMev) {
    std::ostringstream msg;
    msg << "nuclear halo: energy " << energy_mev << " MeV is outside the model's range ["
        << NuclearHalo::kMinEnergyMev << ", " << NuclearHalo::kMaxEnergyMev << "] MeV";
    throw InputError(msg.str());
  }
  return energy_mev;
}

}  // namespace

NuclearHalo::NuclearHalo(double energy_mev)
    : energy_mev_(checked_energy(energy_mev)), range_mm_(physics::csda_range_mm(energy_mev)) {}

void NuclearHalo::check_depth(double wepl_mm) const {
  if (!std::isfinite(wepl_mm) || wepl_mm < 0.0 || wepl_mm > kMaxDepthOverRange * range_mm_) {
    std::ostringstream msg;
    msg << "nuclear halo: WEPL " << wepl_mm << " mm is outside the model's depths [0, "
        << kMaxDepthOverRange * range_mm_ << "] mm for " << energy_mev_ << " MeV (CSDA range "
        << range_mm_ << " mm)";
    throw InputError(msg.str());
  }
}

double NuclearHalo::weight_fraction(double wepl_mm) const {
  check_depth(wepl_mm);
  const double t = wepl_mm / range_mm_;
  return kWeightPerMm * wepl_mm * (1.0 - kWeightDepthDecline * t);
}

double NuclearHalo::sigma_mm(double wepl_mm) const {
  check_depth(wepl_mm);
  const double t = wepl_mm / range_mm_;
  return range_mm_ * (kSigmaRangeFraction + kSigmaRangeSlope * t) + kSigmaOffsetMm;
}

double NuclearHalo::weight_fraction(double wepl_mm, double energy_mev) {
  return NuclearHalo(energy_mev).weight_fraction(wepl_mm);
}

double NuclearHalo::sigma_mm(double wepl_mm, double energy_mev) {
  return NuclearHalo(energy_mev).sigma_mm(wepl_mm);
}

}  // namespace protondose::physics
