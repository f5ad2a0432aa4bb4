#include "protondose/engine/bev_grid.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::engine {
namespace {

bool valid_sad(double sad_mm) { return std::isinf(sad_mm) ? sad_mm > 0 : (std::isfinite(sad_mm) && sad_mm > 0); }

void require_positive(const char* what, const char* name, double value_mm) {
  if (!(value_mm > 0) || !std::isfinite(value_mm)) {
    std::ostringstream m;
    m << what << ": " << name << " is " << value_mm << " mm; must be finite and > 0";
    throw InputError(m.str());
  }
}

void require_sad(const char* what, const char* name, double sad_mm) {
  if (!valid_sad(sad_mm)) {
    std::ostringstream m;
    m << what << ": " << name << " is " << sad_mm << " mm; must be > 0 (infinite for a parallel beam)";
    throw InputError(m.str());
  }
}

}  // namespace

Vec3 BevGrid::beam_point_mm(double col, double row, double slice) const {
  const double d = depth0_mm + slice * depth_step_mm;
  return {iso_x_mm(col) * magnification_x(d), iso_y_mm(row) * magnification_y(d), d};
}

Vec3 BevGrid::continuous_index(const Vec3& p) const {
  const double d = p[2];
  return {(p[0] / magnification_x(d) - x0_mm) / pitch_x_mm, (p[1] / magnification_y(d) - y0_mm) / pitch_y_mm,
          (d - depth0_mm) / depth_step_mm};
}

double BevGrid::path_per_depth(int col, int row) const {
  const double tx = iso_x_mm(col) / sad_x_mm;  // dx/dd along the ray (0 for a parallel beam)
  const double ty = iso_y_mm(row) / sad_y_mm;
  return std::sqrt(1.0 + tx * tx + ty * ty);
}

void BevGrid::validate(const char* what) const {
  if (cols <= 0 || rows <= 0 || slices <= 0) {
    std::ostringstream m;
    m << what << ": BEV grid size " << cols << " x " << rows << " x " << slices << " (cols x rows x slices); each must be >= 1";
    throw InputError(m.str());
  }
  require_positive(what, "ray pitch x", pitch_x_mm);
  require_positive(what, "ray pitch y", pitch_y_mm);
  require_positive(what, "depth step", depth_step_mm);
  require_sad(what, "virtual source-axis distance x", sad_x_mm);
  require_sad(what, "virtual source-axis distance y", sad_y_mm);
  // Every slice must lie downstream of both virtual sources (m > 0), or rays cross.
  const double first_edge = depth0_mm - 0.5 * depth_step_mm;
  if (magnification_x(first_edge) <= 0 || magnification_y(first_edge) <= 0) {
    std::ostringstream m;
    m << what << ": BEV grid starts at depth " << first_edge << " mm, at or upstream of a virtual source (SAD "
      << sad_x_mm << " / " << sad_y_mm << " mm)";
    throw InputError(m.str());
  }
}

BevGrid make_bev_grid(const BevGridSpec& s) {
  const char* what = "BEV grid";
  require_positive(what, "ray pitch x", s.pitch_x_mm);
  require_positive(what, "ray pitch y", s.pitch_y_mm);
  require_positive(what, "depth step", s.depth_step_mm);
  require_sad(what, "virtual source-axis distance x", s.sad_x_mm);
  require_sad(what, "virtual source-axis distance y", s.sad_y_mm);
  const double lx = s.spot_min_x_mm - s.margin_x_mm, hx = s.spot_max_x_mm + s.margin_x_mm;
  const double ly = s.spot_min_y_mm - s.margin_y_mm, hy = s.spot_max_y_mm + s.margin_y_mm;
  if (!(hx >= lx) || !(hy >= ly) || !std::isfinite(lx + hx + ly + hy)) {
    std::ostringstream m;
    m << what << ": lateral extent x [" << lx << ", " << hx << "] mm, y [" << ly << ", " << hy
      << "] mm is empty or not finite";
    throw InputError(m.str());
  }
  if (!(s.depth_end_mm > s.depth_begin_mm) || !std::isfinite(s.depth_end_mm - s.depth_begin_mm)) {
    std::ostringstream m;
    m << what << ": depth range [" << s.depth_begin_mm << ", " << s.depth_end_mm << "] mm is empty";
    throw InputError(m.str());
  }
  BevGrid g;
  g.sad_x_mm = s.sad_x_mm;
  g.sad_y_mm = s.sad_y_mm;
  g.pitch_x_mm = s.pitch_x_mm;
  g.pitch_y_mm = s.pitch_y_mm;
  g.depth_step_mm = s.depth_step_mm;
  // Pixel centres span the extent; an odd or even count centred on the box keeps
  // a symmetric spot pattern symmetric on the grid.
  g.cols = static_cast<int>(std::ceil((hx - lx) / s.pitch_x_mm - 1e-9)) + 1;
  g.rows = static_cast<int>(std::ceil((hy - ly) / s.pitch_y_mm - 1e-9)) + 1;
  g.x0_mm = 0.5 * (lx + hx) - 0.5 * (g.cols - 1) * s.pitch_x_mm;
  g.y0_mm = 0.5 * (ly + hy) - 0.5 * (g.rows - 1) * s.pitch_y_mm;
  g.slices = static_cast<int>(std::ceil((s.depth_end_mm - s.depth_begin_mm) / s.depth_step_mm - 1e-9));
  if (g.slices < 1) g.slices = 1;
  g.depth0_mm = s.depth_begin_mm + 0.5 * s.depth_step_mm;
  g.validate(what);
  return g;
}

}  // namespace protondose::engine
