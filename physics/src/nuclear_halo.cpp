#include "protondose/physics/nuclear_halo.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/physics/materials.h"
#include "protondose/physics/range_energy.h"
#include "protondose/physics/scattering.h"

namespace protondose::physics {
namespace {

// kSoukup2005: Soukup, Fippel & Alber, Phys Med Biol 50:5089 (2005), the halo
// weight and width of their Monte Carlo-derived pencil beam (z, R in mm), as
// transcribed by da Silva et al. 2015 (Front Oncol 5:281, their code's table)
// and Bhattacharya et al. 2025 (J Appl Clin Med Phys 26:e70093):
//   W   = 0.052 ln(1.13 + z/(11.2 − 0.023 R)) + 0.35 (0.0017 R² − R)/((R + 3)² − z²)
//         − 1.61e-9 z (R + 3)²
//   σ_N = 2.85 + 0.0014 R ln(z + 3) + 0.06 z − 7.4e-5 z² − 0.22 R/(z − R − 5)²
double soukup_weight_impl(double z_mm, double r_mm) {
  const double r3 = r_mm + 3.0;
  return 0.052 * std::log(1.13 + z_mm / (11.2 - 0.023 * r_mm)) +
         0.35 * (0.0017 * r_mm * r_mm - r_mm) / (r3 * r3 - z_mm * z_mm) - 1.61e-9 * z_mm * r3 * r3;
}

double soukup_sigma_impl(double z_mm, double r_mm) {
  const double pole = z_mm - r_mm - 5.0;
  return 2.85 + 0.0014 * r_mm * std::log(z_mm + 3.0) + 0.06 * z_mm - 7.4e-5 * z_mm * z_mm -
         0.22 * r_mm / (pole * pole);
}

// kMcsquareFit: nuclear_halo.h / docs/physics/nuclear-halo.md, fitted to the
// MCsquare containment fractions of shared/reference/dcpt-v5-water-idd.
constexpr double kWeightPerMm = 4.239e-4;       // κ, 1/mm
constexpr double kWeightDepthDecline = 0.0932;  // b
constexpr double kSigmaRangeFraction = 0.2105;  // a
constexpr double kSigmaRangeSlope = -0.1794;    // c
constexpr double kSigmaOffsetMm = 7.16;         // d, mm

// Step of the tabulated zero-width pencil variance A2(w) (kSoukup2005), mm.
constexpr double kPencilStepMm = 0.5;

double checked_energy(double energy_mev, HaloModel model) {
  const double highest = NuclearHalo::max_energy_mev(model);
  if (!std::isfinite(energy_mev) || energy_mev < NuclearHalo::kMinEnergyMev || energy_mev > highest) {
    std::ostringstream msg;
    msg << "nuclear halo (" << halo_model_name(model) << "): energy " << energy_mev
        << " MeV is outside the model's range [" << NuclearHalo::kMinEnergyMev << ", " << highest << "] MeV";
    throw InputError(msg.str());
  }
  return energy_mev;
}

}  // namespace

double soukup_halo_weight(double depth_mm, double range_mm) { return soukup_weight_impl(depth_mm, range_mm); }

double soukup_halo_added_sigma_mm(double depth_mm, double range_mm) {
  return soukup_sigma_impl(depth_mm, range_mm);
}

const char* halo_model_name(HaloModel model) noexcept {
  switch (model) {
    case HaloModel::kSoukup2005: return "soukup-2005";
    case HaloModel::kMcsquareFit: return "mcsquare-fit";
  }
  return "unknown";
}

double NuclearHalo::max_energy_mev(HaloModel model) noexcept {
  return model == HaloModel::kSoukup2005 ? kSoukupMaxEnergyMev : kMaxEnergyMev;
}

NuclearHalo::NuclearHalo(double energy_mev, HaloModel model)
    : model_(model), energy_mev_(checked_energy(energy_mev, model)), range_mm_(physics::csda_range_mm(energy_mev)) {
  if (model_ != HaloModel::kSoukup2005) return;
  // Fermi–Eyges variance of a zero-width pencil in water (scattering.h, its
  // default scattering power), tabulated to the deepest depth answered.
  const double deepest_mm = kMaxDepthOverRange * range_mm_;
  const int steps = static_cast<int>(std::ceil(deepest_mm / kPencilStepMm));
  pencil_step_mm_ = kPencilStepMm;
  pencil_a2_mm2_.reserve(static_cast<std::size_t>(steps) + 1);
  pencil_a2_mm2_.push_back(0.0);
  FermiEygesMoments m;
  const double x0 = radiation_length_g_cm2(1.0);
  for (int k = 0; k < steps; ++k) {
    const double w_mid = (k + 0.5) * kPencilStepMm;
    const double e_mid = w_mid < range_mm_ ? residual_energy_mev(energy_mev_, w_mid) : 0.0;
    m = e_mid > 0.5 ? advance(m, kPencilStepMm, 1.0, x0, e_mid) : drift(m, kPencilStepMm);
    pencil_a2_mm2_.push_back(m.a2_mm2);
  }
}

void NuclearHalo::check_depth(double wepl_mm) const {
  if (!std::isfinite(wepl_mm) || wepl_mm < 0.0 || wepl_mm > kMaxDepthOverRange * range_mm_) {
    std::ostringstream msg;
    msg << "nuclear halo: WEPL " << wepl_mm << " mm is outside the model's depths [0, "
        << kMaxDepthOverRange * range_mm_ << "] mm for " << energy_mev_ << " MeV (CSDA range "
        << range_mm_ << " mm)";
    throw InputError(msg.str());
  }
}

double NuclearHalo::pencil_variance_mm2(double wepl_mm) const {
  const double u = wepl_mm / pencil_step_mm_;
  const std::size_t last = pencil_a2_mm2_.size() - 1;
  const std::size_t k = std::min(static_cast<std::size_t>(u), last - 1);
  const double f = std::min(u - static_cast<double>(k), 1.0);
  return pencil_a2_mm2_[k] + f * (pencil_a2_mm2_[k + 1] - pencil_a2_mm2_[k]);
}

double NuclearHalo::weight_fraction(double wepl_mm) const {
  check_depth(wepl_mm);
  if (model_ == HaloModel::kSoukup2005)
    return std::max(soukup_weight_impl(std::min(wepl_mm, range_mm_), range_mm_), 0.0);
  const double t = wepl_mm / range_mm_;
  return kWeightPerMm * wepl_mm * (1.0 - kWeightDepthDecline * t);
}

double NuclearHalo::added_sigma_mm(double wepl_mm) const {
  check_depth(wepl_mm);
  if (model_ != HaloModel::kSoukup2005) return 0.0;
  return std::max(soukup_sigma_impl(std::min(wepl_mm, range_mm_), range_mm_), 0.0);
}

double NuclearHalo::sigma_mm(double wepl_mm) const {
  check_depth(wepl_mm);
  if (model_ == HaloModel::kSoukup2005) {
    const double added = added_sigma_mm(wepl_mm);
    return std::sqrt(pencil_variance_mm2(wepl_mm) + added * added);
  }
  const double t = wepl_mm / range_mm_;
  return range_mm_ * (kSigmaRangeFraction + kSigmaRangeSlope * t) + kSigmaOffsetMm;
}

double NuclearHalo::sigma_with_core_mm(double wepl_mm, double core_sigma_mm) const {
  check_depth(wepl_mm);
  if (!std::isfinite(core_sigma_mm) || core_sigma_mm < 0.0) {
    std::ostringstream msg;
    msg << "nuclear halo: core sigma " << core_sigma_mm << " mm must be finite and >= 0";
    throw InputError(msg.str());
  }
  if (model_ != HaloModel::kSoukup2005) return sigma_mm(wepl_mm);
  const double added = added_sigma_mm(wepl_mm);
  return std::sqrt(core_sigma_mm * core_sigma_mm + added * added);
}

double NuclearHalo::weight_fraction(double wepl_mm, double energy_mev) {
  return NuclearHalo(energy_mev).weight_fraction(wepl_mm);
}

double NuclearHalo::sigma_mm(double wepl_mm, double energy_mev) {
  return NuclearHalo(energy_mev).sigma_mm(wepl_mm);
}

}  // namespace protondose::physics
