#include "protondose/physics/spot_optics.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "beam_io.h"
#include "protondose/core/error.h"

namespace protondose::physics {

using detail::fmt;

const char* spot_size_policy_name(SpotSizePolicy policy) noexcept {
  switch (policy) {
    case SpotSizePolicy::kBeamModel: return "beam-model";
    case SpotSizePolicy::kPlanSpotSizeAtIsocentre: return "plan-spot-size-at-isocentre";
  }
  return "unknown";
}

double sigma_in_air_mm(const AxisEmittance& e, double s_from_reference_plane_mm) {
  const double s = s_from_reference_plane_mm;
  const double variance = e.sigma_mm * e.sigma_mm +
                          2.0 * e.correlation * e.sigma_mm * e.sigma_theta_rad * s +
                          e.sigma_theta_rad * e.sigma_theta_rad * s * s;
  if (!(variance >= 0.0))
    throw NumericalError("spot optics: negative variance " + fmt(variance) + " mm2 at " + fmt(s) +
                         " mm from the reference plane (sigma " + fmt(e.sigma_mm) + " mm, sigma' " +
                         fmt(e.sigma_theta_rad) + " rad, correlation " + fmt(e.correlation) +
                         "; |correlation| must be < 1)");
  return std::sqrt(variance);
}

double sigma_in_air_at_z_from_isocentre_mm(const AxisEmittance& emittance,
                                           double reference_plane_upstream_of_isocentre_mm,
                                           double z_from_isocentre_mm) {
  return sigma_in_air_mm(emittance, reference_plane_upstream_of_isocentre_mm + z_from_isocentre_mm);
}

AxisEmittance with_sigma_at_isocentre(const AxisEmittance& e,
                                      double reference_plane_upstream_of_isocentre_mm,
                                      double sigma_at_isocentre_mm) {
  const double l = reference_plane_upstream_of_isocentre_mm;
  const double st = e.sigma_theta_rad * l;  // divergence contribution at the isocentre (mm)
  const double reachable_sq = (1.0 - e.correlation * e.correlation) * st * st;
  const double target = sigma_at_isocentre_mm;
  const double root_sq = target * target - reachable_sq;
  const double sigma0 = -e.correlation * st + std::sqrt(std::max(root_sq, 0.0));
  if (!std::isfinite(target) || !(target > 0.0) || root_sq < 0.0 || !(sigma0 > 0.0))
    throw InputError("spot size override: sigma " + fmt(target) + " mm (FWHM " +
                     fmt(target * kFwhmPerSigma) + " mm) at the isocentre cannot be reached with the " +
                     "beam model's divergence " + fmt(e.sigma_theta_rad) + " rad and correlation " +
                     fmt(e.correlation) + " over " + fmt(l) + " mm (the smallest sigma reachable with sigma0 > 0 is " +
                     fmt(e.correlation < 0.0 ? std::sqrt(reachable_sq) : st) + " mm)");
  AxisEmittance out = e;
  out.sigma_mm = sigma0;
  return out;
}

}  // namespace protondose::physics
