#include "protondose/compare/dose_difference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "protondose/compare/resample.h"
#include "protondose/core/error.h"
#include "volume_checks.h"

namespace protondose::compare {
namespace {

/// The evaluated dose on the reference grid: `eval` itself when the grids
/// match, else a trilinear resampling held in `storage`.
const Volume<float>& on_reference_grid(const Volume<float>& ref, const Volume<float>& eval,
                                       Volume<float>& storage) {
  if (eval.grid == ref.grid) return eval;
  storage = resample_trilinear(eval, ref.grid);
  return storage;
}

}  // namespace

DoseDifferenceResult dose_difference(const Volume<float>& ref, const Volume<float>& eval,
                                     const DoseDifferenceOptions& options) {
  if (!(options.threshold_percent >= 0.0 && options.threshold_percent < 100.0)) {
    std::ostringstream m;
    m << "dose difference: threshold " << options.threshold_percent << " % is outside [0, 100)";
    throw ConfigError(m.str());
  }
  if (!(options.normalisation_dose_gy >= 0.0 && std::isfinite(options.normalisation_dose_gy))) {
    std::ostringstream m;
    m << "dose difference: normalisation dose " << options.normalisation_dose_gy
      << " Gy must be 0 (= reference maximum) or > 0";
    throw ConfigError(m.str());
  }
  detail::check_volume(ref, "dose difference reference dose");
  detail::check_volume(eval, "dose difference evaluated dose");
  const double ref_max = detail::max_value(ref);
  if (!(ref_max > 0.0)) {
    std::ostringstream m;
    m << "dose difference reference dose: maximum is " << ref_max
      << " Gy; a reference dose that is zero everywhere cannot be compared against";
    throw InputError(m.str());
  }
  Volume<float> storage;
  const Volume<float>& e = on_reference_grid(ref, eval, storage);

  DoseDifferenceResult r;
  r.normalisation_dose_gy = options.normalisation_dose_gy > 0.0 ? options.normalisation_dose_gy : ref_max;
  r.threshold_dose_gy = options.threshold_percent / 100.0 * r.normalisation_dose_gy;
  double sum = 0.0, sum2 = 0.0;
  r.max_gy = -std::numeric_limits<double>::infinity();
  r.min_gy = std::numeric_limits<double>::infinity();
  for (std::size_t n = 0; n < ref.data.size(); ++n) {
    if (ref.data[n] < r.threshold_dose_gy) continue;
    const double d = static_cast<double>(e.data[n]) - ref.data[n];
    ++r.voxels;
    sum += d;
    sum2 += d * d;
    r.max_gy = std::max(r.max_gy, d);
    r.min_gy = std::min(r.min_gy, d);
  }
  if (r.voxels == 0) {
    std::ostringstream m;
    m << "dose difference: no reference voxel reaches the threshold of " << r.threshold_dose_gy
      << " Gy; the reference maximum is " << ref_max << " Gy";
    throw InputError(m.str());
  }
  const double n = static_cast<double>(r.voxels);
  r.mean_gy = sum / n;
  r.rms_gy = std::sqrt(sum2 / n);
  r.max_abs_gy = std::max(std::abs(r.max_gy), std::abs(r.min_gy));
  const double to_percent = 100.0 / r.normalisation_dose_gy;
  r.mean_percent = r.mean_gy * to_percent;
  r.rms_percent = r.rms_gy * to_percent;
  r.max_percent = r.max_gy * to_percent;
  r.min_percent = r.min_gy * to_percent;
  r.max_abs_percent = r.max_abs_gy * to_percent;
  return r;
}

Volume<float> dose_difference_volume(const Volume<float>& ref, const Volume<float>& eval) {
  detail::check_volume(ref, "dose difference reference dose");
  detail::check_volume(eval, "dose difference evaluated dose");
  Volume<float> storage;
  const Volume<float>& e = on_reference_grid(ref, eval, storage);
  Volume<float> diff(ref.grid);
  for (std::size_t n = 0; n < ref.data.size(); ++n) diff.data[n] = e.data[n] - ref.data[n];
  return diff;
}

std::vector<ProfilePoint> dose_profile(const Volume<float>& dose, const Vec3& start_mm,
                                       const Vec3& end_mm, double step_mm) {
  detail::check_volume(dose, "dose profile volume");
  if (!(step_mm > 0.0) || !std::isfinite(step_mm)) {
    std::ostringstream m;
    m << "dose profile: step " << step_mm << " mm must be finite and > 0";
    throw InputError(m.str());
  }
  const Vec3 d{end_mm[0] - start_mm[0], end_mm[1] - start_mm[1], end_mm[2] - start_mm[2]};
  const double length_mm = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  if (!(length_mm > 0.0)) throw InputError("dose profile: start and end points coincide; the profile has no length");
  const auto steps = static_cast<std::size_t>(std::ceil(length_mm / step_mm - 1e-9));
  std::vector<ProfilePoint> out;
  out.reserve(steps + 1);
  for (std::size_t s = 0; s <= steps; ++s) {
    const double t_mm = std::min(length_mm, static_cast<double>(s) * step_mm);
    const double f = t_mm / length_mm;
    const Vec3 p{start_mm[0] + f * d[0], start_mm[1] + f * d[1], start_mm[2] + f * d[2]};
    const Vec3 ijk = dose.grid.continuous_index(p);
    out.push_back({t_mm, sample_trilinear(dose, ijk[0], ijk[1], ijk[2])});
  }
  return out;
}

Vec3 beam_direction_hfs(double gantry_deg, double couch_deg) {
  if (std::abs(couch_deg) > 1e-6) {
    std::ostringstream m;
    m << "beam axis for depth profiles: couch angle " << couch_deg
      << " deg is not supported (only couch 0, head-first supine)";
    throw UnavailableError(m.str());
  }
  constexpr double kPi = 3.14159265358979323846;
  const double t = gantry_deg * kPi / 180.0;
  return {-std::sin(t), std::cos(t), 0.0};
}

std::vector<ProfilePoint> depth_profile_along_beam(const Volume<float>& dose, const Vec3& isocenter_mm,
                                                   const Vec3& direction, double step_mm) {
  detail::check_volume(dose, "depth profile volume");
  const double len = std::sqrt(direction[0] * direction[0] + direction[1] * direction[1] +
                               direction[2] * direction[2]);
  if (!(len > 0.0)) throw InputError("depth profile: the beam direction is the zero vector");
  const Vec3 d{direction[0] / len, direction[1] / len, direction[2] / len};
  // Clip the line p(t) = iso + t·d to the grid extent (slab method in index space).
  const Vec3 c0 = dose.grid.continuous_index(isocenter_mm);
  const Vec3 c1 = dose.grid.continuous_index({isocenter_mm[0] + d[0], isocenter_mm[1] + d[1], isocenter_mm[2] + d[2]});
  double t_min = -std::numeric_limits<double>::infinity(), t_max = std::numeric_limits<double>::infinity();
  for (int a = 0; a < 3; ++a) {
    const double lo = -0.5, hi = dose.grid.size[a] - 0.5, rate = c1[a] - c0[a];
    if (std::abs(rate) < 1e-12) {
      if (c0[a] < lo || c0[a] > hi) t_min = std::numeric_limits<double>::infinity();
      continue;
    }
    double ta = (lo - c0[a]) / rate, tb = (hi - c0[a]) / rate;
    if (ta > tb) std::swap(ta, tb);
    t_min = std::max(t_min, ta);
    t_max = std::min(t_max, tb);
  }
  if (!(t_max > t_min)) {
    std::ostringstream m;
    m << "depth profile: the beam axis through (" << isocenter_mm[0] << ", " << isocenter_mm[1] << ", "
      << isocenter_mm[2] << ") mm along (" << d[0] << ", " << d[1] << ", " << d[2]
      << ") does not cross the dose grid";
    throw InputError(m.str());
  }
  const Vec3 start{isocenter_mm[0] + t_min * d[0], isocenter_mm[1] + t_min * d[1], isocenter_mm[2] + t_min * d[2]};
  const Vec3 end{isocenter_mm[0] + t_max * d[0], isocenter_mm[1] + t_max * d[1], isocenter_mm[2] + t_max * d[2]};
  std::vector<ProfilePoint> profile = dose_profile(dose, start, end, step_mm);
  for (ProfilePoint& p : profile) p.distance_mm += t_min;
  return profile;
}

DistalFalloff distal_falloff(const std::vector<ProfilePoint>& profile) {
  if (profile.size() < 2) {
    std::ostringstream m;
    m << "distal falloff: the profile has " << profile.size() << " points; at least 2 are needed";
    throw InputError(m.str());
  }
  std::size_t peak = 0;
  for (std::size_t n = 1; n < profile.size(); ++n)
    if (profile[n].dose_gy > profile[peak].dose_gy) peak = n;
  DistalFalloff f;
  f.max_dose_gy = profile[peak].dose_gy;
  f.max_position_mm = profile[peak].distance_mm;
  if (!(f.max_dose_gy > 0.0)) {
    std::ostringstream m;
    m << "distal falloff: the profile maximum is " << f.max_dose_gy << " Gy; no falloff to measure";
    throw InputError(m.str());
  }
  // Distal-most crossing of `level`: the last sample at or above it, then linear
  // interpolation to the next one. Taking the last crossing (not the first one
  // after the maximum) keeps a dip between peaks or noise on a plateau from
  // being mistaken for the distal falloff.
  auto crossing = [&](double fraction) {
    const double level = fraction * f.max_dose_gy;
    std::size_t last = peak;
    for (std::size_t n = profile.size(); n-- > peak;) {
      if (profile[n].dose_gy >= level) {
        last = n;
        break;
      }
    }
    if (last + 1 >= profile.size()) {
      std::ostringstream m;
      m << "distal falloff: the profile does not fall below " << 100 * fraction << " % of its maximum ("
        << f.max_dose_gy << " Gy at " << f.max_position_mm << " mm) before its end at "
        << profile.back().distance_mm << " mm";
      throw InputError(m.str());
    }
    const ProfilePoint& a = profile[last];
    const ProfilePoint& b = profile[last + 1];
    return a.distance_mm + (a.dose_gy - level) / (a.dose_gy - b.dose_gy) * (b.distance_mm - a.distance_mm);
  };
  f.r80_mm = crossing(0.8);
  f.r20_mm = crossing(0.2);
  return f;
}

}  // namespace protondose::compare
