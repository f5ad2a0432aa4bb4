#include "protondose/engine/spot_fluence.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "beam_kernels.h"
#include "protondose/core/error.h"

namespace protondose::engine {

void validate_spots(const std::vector<SpotProtons>& spots, const char* what) {
  for (std::size_t s = 0; s < spots.size(); ++s) {
    const SpotProtons& spot = spots[s];
    if (!(spot.protons >= 0) || !std::isfinite(spot.protons + spot.x_iso_mm + spot.y_iso_mm)) {
      std::ostringstream m;
      m << what << ": spot " << s << " at (" << spot.x_iso_mm << ", " << spot.y_iso_mm << ") mm has " << spot.protons
        << " protons; position must be finite and protons finite and >= 0";
      throw InputError(m.str());
    }
  }
}

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
  validate_spots(spots, "spot fluence");
  const double sx = sigma_x_iso_mm / grid.pitch_x_mm, sy = sigma_y_iso_mm / grid.pitch_y_mm;
  std::vector<double> wx;
  for (const SpotProtons& spot : spots) {
    if (spot.protons == 0) continue;
    // The same weights, in the same order, as the GPU executor's spreading kernel.
    const double cx = (spot.x_iso_mm - grid.x0_mm) / grid.pitch_x_mm, cy = (spot.y_iso_mm - grid.y0_mm) / grid.pitch_y_mm;
    int x_lo, x_hi, y_lo, y_hi;
    kernels::spot_axis_range(cx, sx, cutoff_sigmas, grid.cols, &x_lo, &x_hi);
    kernels::spot_axis_range(cy, sy, cutoff_sigmas, grid.rows, &y_lo, &y_hi);
    wx.clear();
    for (int c = x_lo; c <= x_hi; ++c) wx.push_back(kernels::spot_axis_weight(c, cx, sx));
    for (int r = y_lo; r <= y_hi; ++r) {
      double* row = fluence.data() + static_cast<std::size_t>(r) * grid.cols;
      const double py = spot.protons * kernels::spot_axis_weight(r, cy, sy);
      for (int c = x_lo; c <= x_hi; ++c) row[c] += py * wx[static_cast<std::size_t>(c - x_lo)];
    }
  }
  return fluence;
}

}  // namespace protondose::engine
