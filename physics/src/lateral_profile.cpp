#include "protondose/physics/lateral_profile.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/physics/nuclear_halo.h"

namespace protondose::physics {
namespace {

// Refits of the window before the fit is declared unsettled.
constexpr int kMaxWindowRefits = 100;
// Golden-section steps per fit: the bracket [σ/4, 4σ] shrinks by 0.618 each
// step, to ~1e-24 σ after 120; the answer is then limited by how flat the
// residual is at its minimum in double precision (~1e-8 mm).
constexpr int kGoldenSectionSteps = 120;
constexpr double kGoldenFraction = 0.3819660112501051;  // (3 − √5)/2
// Fewest voxels a two-parameter fit is made on.
constexpr std::size_t kMinFittedVoxels = 3;

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Integral of a normalised centred Gaussian over the voxel [u − Δ/2, u + Δ/2].
double voxel_integral(double centre_mm, double voxel_mm, double sigma_mm) {
  return normal_cdf((centre_mm + 0.5 * voxel_mm) / sigma_mm) - normal_cdf((centre_mm - 0.5 * voxel_mm) / sigma_mm);
}

void check_window(const CoreFitOptions& o) {
  std::ostringstream msg;
  if (!std::isfinite(o.window_sigmas) || !(o.window_sigmas > 0.0)) {
    msg << "core-σ fit: window " << o.window_sigmas << " σ is not valid; expected a finite number of σ > 0";
  } else if (o.weighting != CoreFitWeighting::kUniform && o.weighting != CoreFitWeighting::kInverseDose) {
    msg << "core-σ fit: unknown voxel weighting " << static_cast<int>(o.weighting)
        << "; expected uniform or inverse-dose";
  } else {
    return;
  }
  throw InputError(msg.str());
}

void check_voxel_width(double voxel_mm) {
  if (std::isfinite(voxel_mm) && voxel_mm > 0.0) return;
  std::ostringstream msg;
  msg << "lateral profile: voxel width " << voxel_mm << " mm is not valid; expected a finite width > 0 mm";
  throw InputError(msg.str());
}

void check_components(const std::vector<LateralGaussian>& components) {
  if (components.empty()) throw InputError("lateral profile: no Gaussian component; expected at least one");
  double total = 0.0;
  for (std::size_t i = 0; i < components.size(); ++i) {
    const LateralGaussian& c = components[i];
    if (!std::isfinite(c.weight) || c.weight < 0.0 || !std::isfinite(c.sigma_mm) || !(c.sigma_mm > 0.0)) {
      std::ostringstream msg;
      msg << "lateral profile: component " << i << " has weight " << c.weight << " and σ " << c.sigma_mm
          << " mm; expected a finite weight ≥ 0 and a finite σ > 0 mm";
      throw InputError(msg.str());
    }
    total += c.weight;
  }
  if (!(total > 0.0)) throw InputError("lateral profile: all component weights are 0; expected a positive integral");
}

void check_profile(const VoxelProfile& p) {
  check_voxel_width(p.voxel_mm);
  if (!std::isfinite(p.first_centre_mm)) {
    std::ostringstream msg;
    msg << "core-σ fit: first voxel centre " << p.first_centre_mm << " mm is not finite";
    throw InputError(msg.str());
  }
  if (p.dose.empty()) throw InputError("core-σ fit: the profile has no voxel; expected at least 3");
  double total = 0.0;
  for (std::size_t i = 0; i < p.dose.size(); ++i) {
    if (!std::isfinite(p.dose[i]) || p.dose[i] < 0.0) {
      std::ostringstream msg;
      msg << "core-σ fit: voxel " << i << " has dose " << p.dose[i] << "; expected a finite dose ≥ 0";
      throw InputError(msg.str());
    }
    total += p.dose[i];
  }
  if (!(total > 0.0)) throw InputError("core-σ fit: all voxel doses are 0; expected a profile with a positive integral");
}

struct Voxel {
  double centre_mm;
  double dose;  // integral of the profile over the voxel
};

// Least-squares residual over `fitted` of the Gaussian of σ with its best amplitude A.
double residual(const std::vector<Voxel>& fitted, double voxel_mm, double sigma_mm, CoreFitWeighting weighting) {
  double num = 0.0, den = 0.0;
  std::vector<double> g(fitted.size());
  for (std::size_t i = 0; i < fitted.size(); ++i) {
    g[i] = voxel_integral(fitted[i].centre_mm, voxel_mm, sigma_mm);
    const double w = weighting == CoreFitWeighting::kInverseDose ? 1.0 / fitted[i].dose : 1.0;
    num += w * fitted[i].dose * g[i];
    den += w * g[i] * g[i];
  }
  const double amplitude = den > 0.0 ? num / den : 0.0;
  double sum = 0.0;
  for (std::size_t i = 0; i < fitted.size(); ++i) {
    const double w = weighting == CoreFitWeighting::kInverseDose ? 1.0 / fitted[i].dose : 1.0;
    const double r = fitted[i].dose - amplitude * g[i];
    sum += w * r * r;
  }
  return sum;
}

// σ minimising the residual over `fitted`, searched in [σ_start/4, 4σ_start].
double best_sigma(const std::vector<Voxel>& fitted, double voxel_mm, double sigma_start_mm,
                  CoreFitWeighting weighting) {
  double lo = 0.25 * sigma_start_mm, hi = 4.0 * sigma_start_mm;
  double a = lo + kGoldenFraction * (hi - lo), b = hi - kGoldenFraction * (hi - lo);
  double fa = residual(fitted, voxel_mm, a, weighting), fb = residual(fitted, voxel_mm, b, weighting);
  for (int step = 0; step < kGoldenSectionSteps; ++step) {
    if (fa < fb) {
      hi = b;
      b = a;
      fb = fa;
      a = lo + kGoldenFraction * (hi - lo);
      fa = residual(fitted, voxel_mm, a, weighting);
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = hi - kGoldenFraction * (hi - lo);
      fb = residual(fitted, voxel_mm, b, weighting);
    }
  }
  return 0.5 * (lo + hi);
}

}  // namespace

const char* core_fit_weighting_name(CoreFitWeighting weighting) noexcept {
  switch (weighting) {
    case CoreFitWeighting::kUniform: return "uniform";
    case CoreFitWeighting::kInverseDose: return "inverse-dose";
  }
  return "unknown";
}

VoxelProfile voxelise(const std::vector<LateralGaussian>& components, double voxel_mm, double half_width_mm) {
  check_components(components);
  check_voxel_width(voxel_mm);
  if (!std::isfinite(half_width_mm) || !(half_width_mm >= voxel_mm)) {
    std::ostringstream msg;
    msg << "lateral profile: half-width " << half_width_mm << " mm is not valid; expected a finite value ≥ the voxel width "
        << voxel_mm << " mm";
    throw InputError(msg.str());
  }
  // Voxel edges at k·Δ, centres at (k + ½)Δ, k = −n … n − 1.
  const auto half_count = static_cast<long>(std::floor(half_width_mm / voxel_mm + 1e-9));
  VoxelProfile profile;
  profile.voxel_mm = voxel_mm;
  profile.first_centre_mm = (0.5 - static_cast<double>(half_count)) * voxel_mm;
  profile.dose.reserve(static_cast<std::size_t>(2 * half_count));
  for (long k = -half_count; k < half_count; ++k) {
    const double centre = (static_cast<double>(k) + 0.5) * voxel_mm;
    double dose = 0.0;
    for (const LateralGaussian& c : components) dose += c.weight * voxel_integral(centre, voxel_mm, c.sigma_mm);
    profile.dose.push_back(dose);
  }
  return profile;
}

double fitted_core_sigma_mm(const VoxelProfile& profile, const CoreFitOptions& options) {
  check_profile(profile);
  check_window(options);

  std::vector<Voxel> voxels;
  voxels.reserve(profile.dose.size());
  double sum = 0.0, sum_u2 = 0.0;
  for (std::size_t i = 0; i < profile.dose.size(); ++i) {
    const double centre = profile.first_centre_mm + static_cast<double>(i) * profile.voxel_mm;
    voxels.push_back({centre, profile.dose[i]});
    sum += profile.dose[i];
    sum_u2 += profile.dose[i] * centre * centre;
  }
  // Start from the rms of the whole profile (at least one voxel wide).
  double sigma = std::max(std::sqrt(sum_u2 / sum), profile.voxel_mm);
  // window_counts[i]: voxels in the i-th window; fits[i]: the σ fitted on it.
  // The windows are nested in σ, so an equal count means the same voxels.
  std::vector<std::size_t> window_counts;
  std::vector<double> fits;
  for (int refit = 0; refit < kMaxWindowRefits; ++refit) {
    std::vector<Voxel> fitted;
    for (const Voxel& v : voxels)
      if (std::abs(v.centre_mm) <= options.window_sigmas * sigma && v.dose > 0.0) fitted.push_back(v);
    if (fitted.size() < kMinFittedVoxels) {
      std::ostringstream msg;
      msg << "core-σ fit: only " << fitted.size() << " voxels of " << profile.voxel_mm << " mm with dose lie within ±"
          << options.window_sigmas << " σ = ±" << options.window_sigmas * sigma << " mm; need at least "
          << kMinFittedVoxels << " (σ too small for the voxel grid)";
      throw NumericalError(msg.str());
    }
    if (!window_counts.empty() && fitted.size() == window_counts.back()) return sigma;
    const auto seen = std::find(window_counts.begin(), window_counts.end(), fitted.size());
    if (seen != window_counts.end()) {
      // The window alternates: the fitted σ puts the window's edge on a voxel
      // centre. The answer is the mean of the σ fitted in the cycle.
      const auto first = fits.begin() + (seen - window_counts.begin());
      double mean = 0.0;
      for (auto f = first; f != fits.end(); ++f) mean += *f;
      return mean / static_cast<double>(fits.end() - first);
    }
    window_counts.push_back(fitted.size());
    sigma = best_sigma(fitted, profile.voxel_mm, sigma, options.weighting);
    fits.push_back(sigma);
  }
  std::ostringstream msg;
  msg << "core-σ fit: the fit window did not settle within " << kMaxWindowRefits << " refits (last σ " << sigma
      << " mm)";
  throw NumericalError(msg.str());
}

double fitted_core_sigma_mm(const std::vector<LateralGaussian>& components, const CoreFitOptions& options) {
  return fitted_core_sigma_mm(voxelise(components), options);
}

std::vector<LateralGaussian> spot_lateral_profile(const NuclearHalo& halo, double wepl_mm, double core_sigma_mm) {
  const double weight = halo.weight_fraction(wepl_mm);
  const double halo_sigma_mm = halo.sigma_with_core_mm(wepl_mm, core_sigma_mm);
  return {{1.0 - weight, core_sigma_mm}, {weight, halo_sigma_mm}};
}

}  // namespace protondose::physics
