#include "protondose/compare/dvh.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "protondose/core/error.h"
#include "volume_checks.h"

namespace protondose::compare {

double dose_at_volume_percent(const std::vector<float>& descending_doses_gy, double volume_percent) {
  const std::vector<float>& d = descending_doses_gy;
  const double n = static_cast<double>(d.size());
  const double f = volume_percent / 100.0;
  // Each distinct dose value sits at the centre of the volume share of the
  // voxels holding it: voxels q0 … q1−1 (descending) cover fractions
  // [q0/n, q1/n], centre (q0 + q1)/(2n). D_x interpolates linearly between
  // these centres and is constant beyond the first and last.
  double prev_centre = 0.0, prev_dose = d.front();
  bool first = true;
  std::size_t q0 = 0;
  while (q0 < d.size()) {
    std::size_t q1 = q0 + 1;
    while (q1 < d.size() && d[q1] == d[q0]) ++q1;
    const double centre = 0.5 * static_cast<double>(q0 + q1) / n;
    if (f <= centre) {
      if (first) return d[q0];
      const double t = (f - prev_centre) / (centre - prev_centre);
      return prev_dose + t * (static_cast<double>(d[q0]) - prev_dose);
    }
    prev_centre = centre;
    prev_dose = d[q0];
    first = false;
    q0 = q1;
  }
  return d.back();
}

Dvh compute_dvh(const Volume<float>& dose, const Volume<std::uint8_t>& mask, const std::string& roi_name,
                const DvhOptions& options) {
  if (!(options.prescription_gy >= 0.0) || !std::isfinite(options.prescription_gy)) {
    std::ostringstream m;
    m << "DVH of ROI '" << roi_name << "': prescription " << options.prescription_gy
      << " Gy must be 0 (= maximum in the ROI) or > 0";
    throw ConfigError(m.str());
  }
  if (!(options.bin_width_gy >= 0.0) || !std::isfinite(options.bin_width_gy)) {
    std::ostringstream m;
    m << "DVH of ROI '" << roi_name << "': bin width " << options.bin_width_gy
      << " Gy must be 0 (automatic) or > 0";
    throw ConfigError(m.str());
  }
  detail::check_volume(dose, "DVH dose for ROI '" + roi_name + "'");
  detail::check_volume(mask, "DVH mask of ROI '" + roi_name + "'");
  if (mask.grid != dose.grid) {
    throw InputError("DVH of ROI '" + roi_name +
                     "': the structure mask is not on the dose grid; rasterise the ROI on the dose grid");
  }
  Dvh dvh;
  dvh.roi_name = roi_name;
  std::vector<float> doses;
  for (std::size_t n = 0; n < mask.data.size(); ++n)
    if (mask.data[n]) doses.push_back(dose.data[n]);
  if (doses.empty()) {
    throw InputError("DVH of ROI '" + roi_name +
                     "': the structure contains no voxel of the dose grid (empty or outside the grid)");
  }
  std::sort(doses.begin(), doses.end(), std::greater<float>());
  const Grid3& g = dose.grid;
  dvh.voxels = doses.size();
  dvh.volume_cc = static_cast<double>(doses.size()) * g.spacing_mm[0] * g.spacing_mm[1] * g.spacing_mm[2] / 1000.0;
  double sum = 0.0;
  for (float d : doses) sum += d;
  dvh.mean_gy = sum / static_cast<double>(doses.size());
  dvh.max_gy = doses.front();
  dvh.min_gy = doses.back();
  dvh.d2_gy = dose_at_volume_percent(doses, 2.0);
  dvh.d50_gy = dose_at_volume_percent(doses, 50.0);
  dvh.d95_gy = dose_at_volume_percent(doses, 95.0);
  dvh.d98_gy = dose_at_volume_percent(doses, 98.0);
  dvh.prescription_gy = options.prescription_gy > 0.0 ? options.prescription_gy : dvh.max_gy;
  const double level95 = 0.95 * dvh.prescription_gy;
  // doses is descending: the count at or above a level is the first index below it.
  auto at_least = [&](double level) {
    return static_cast<std::size_t>(
        std::partition_point(doses.begin(), doses.end(), [&](float d) { return d >= level; }) - doses.begin());
  };
  const double n = static_cast<double>(doses.size());
  dvh.v95_percent = 100.0 * static_cast<double>(at_least(level95)) / n;

  const double width = options.bin_width_gy > 0.0 ? options.bin_width_gy
                                                  : (dvh.max_gy > 0.0 ? dvh.max_gy / 200.0 : 1.0);
  const auto bins = static_cast<std::size_t>(std::floor(std::max(0.0, dvh.max_gy) / width)) + 2;
  dvh.cumulative.reserve(bins);
  for (std::size_t b = 0; b < bins; ++b) {
    const double level = static_cast<double>(b) * width;
    dvh.cumulative.push_back({level, 100.0 * static_cast<double>(at_least(level)) / n});
  }
  return dvh;
}

}  // namespace protondose::compare
