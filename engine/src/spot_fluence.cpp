#include "protondose/engine/spot_fluence.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::engine {
namespace {

/// Weights of the pixels [first, first + w.size()) along one axis: the
/// Gaussian (centre c_px, width s_px, both in pixels) integrated over each pixel.
void axis_weights(double c_px, double s_px, double cutoff_sigmas, int n, int& first, std::vector<double>& w) {
  w.clear();
  if (s_px <= 0.0) {
    const int i = static_cast<int>(std::lround(c_px));
    first = i;
    if (i >= 0 && i < n) w.push_back(1.0);
    return;
  }
  const int lo = std::max(0, static_cast<int>(std::floor(c_px - cutoff_sigmas * s_px)));
  const int hi = std::min(n - 1, static_cast<int>(std::ceil(c_px + cutoff_sigmas * s_px)));
  first = lo;
  const double inv = 1.0 / (std::sqrt(2.0) * s_px);
  for (int i = lo; i <= hi; ++i)
    w.push_back(0.5 * (std::erf((i + 0.5 - c_px) * inv) - std::erf((i - 0.5 - c_px) * inv)));
}

}  // namespace

std::vector<double> spread_spots_to_rays(const BevGrid& grid, const std::vector<SpotProtons>& spots,
                                         double sigma_x_iso_mm, double sigma_y_iso_mm, double cutoff_sigmas) {
  grid.validate("spot fluence");
  if (!(sigma_x_iso_mm >= 0) || !(sigma_y_iso_mm >= 0) || !std::isfinite(sigma_x_iso_mm + sigma_y_iso_mm)) {
    std::ostringstream m;
    m << "spot fluence: spot sigma (" << sigma_x_iso_mm << ", " << sigma_y_iso_mm
      << ") mm must be finite and >= 0";
    throw InputError(m.str());
  }
  if (!(cutoff_sigmas > 0) || !std::isfinite(cutoff_sigmas)) {
    std::ostringstream m;
    m << "spot fluence: cut-off " << cutoff_sigmas << " sigma must be finite and > 0";
    throw InputError(m.str());
  }
  std::vector<double> fluence(grid.rays(), 0.0);
  std::vector<double> wx, wy;
  const double sx = sigma_x_iso_mm / grid.pitch_x_mm, sy = sigma_y_iso_mm / grid.pitch_y_mm;
  for (std::size_t s = 0; s < spots.size(); ++s) {
    const SpotProtons& spot = spots[s];
    if (!(spot.protons >= 0) || !std::isfinite(spot.protons + spot.x_iso_mm + spot.y_iso_mm)) {
      std::ostringstream m;
      m << "spot fluence: spot " << s << " at (" << spot.x_iso_mm << ", " << spot.y_iso_mm << ") mm has "
        << spot.protons << " protons; position must be finite and protons finite and >= 0";
      throw InputError(m.str());
    }
    if (spot.protons == 0) continue;
    int fx = 0, fy = 0;
    axis_weights((spot.x_iso_mm - grid.x0_mm) / grid.pitch_x_mm, sx, cutoff_sigmas, grid.cols, fx, wx);
    axis_weights((spot.y_iso_mm - grid.y0_mm) / grid.pitch_y_mm, sy, cutoff_sigmas, grid.rows, fy, wy);
    for (std::size_t r = 0; r < wy.size(); ++r) {
      double* row = fluence.data() + static_cast<std::size_t>(fy + static_cast<int>(r)) * grid.cols + fx;
      const double py = spot.protons * wy[r];
      for (std::size_t c = 0; c < wx.size(); ++c) row[c] += py * wx[c];
    }
  }
  return fluence;
}

}  // namespace protondose::engine
