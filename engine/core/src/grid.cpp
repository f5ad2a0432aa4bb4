#include "protondose/core/grid.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose {

Vec3 Grid3::position_mm(double i, double j, double k) const {
  const double step[3] = {i * spacing_mm[0], j * spacing_mm[1], k * spacing_mm[2]};
  Vec3 p = origin_mm;
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 3; ++c) p[c] += step[a] * axis[a][c];
  return p;
}

Vec3 Grid3::continuous_index(const Vec3& point_mm) const {
  const Vec3 d{point_mm[0] - origin_mm[0], point_mm[1] - origin_mm[1],
               point_mm[2] - origin_mm[2]};
  Vec3 ijk{};
  // The axes are orthonormal (validate()), so projection inverts position_mm.
  for (int a = 0; a < 3; ++a)
    ijk[a] = (d[0] * axis[a][0] + d[1] * axis[a][1] + d[2] * axis[a][2]) / spacing_mm[a];
  return ijk;
}

bool Grid3::axis_aligned() const {
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 3; ++c)
      if (std::abs(axis[a][c] - (a == c ? 1.0 : 0.0)) > 1e-9) return false;
  return true;
}

void Grid3::validate(const std::string& what) const {
  for (int a = 0; a < 3; ++a) {
    if (size[a] <= 0) {
      std::ostringstream m;
      m << what << ": grid size along axis " << a << " is " << size[a] << "; must be >= 1";
      throw InputError(m.str());
    }
    if (!(spacing_mm[a] > 0.0) || !std::isfinite(spacing_mm[a])) {
      std::ostringstream m;
      m << what << ": grid spacing along axis " << a << " is " << spacing_mm[a]
        << " mm; must be finite and > 0";
      throw InputError(m.str());
    }
  }
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      const double dot = axis[a][0] * axis[b][0] + axis[a][1] * axis[b][1] + axis[a][2] * axis[b][2];
      if (std::abs(dot - (a == b ? 1.0 : 0.0)) > 1e-4) {
        std::ostringstream m;
        m << what << ": grid axes are not orthonormal (axis " << a << " . axis " << b << " = "
          << dot << ")";
        throw InputError(m.str());
      }
    }
  }
}

bool operator==(const Grid3& a, const Grid3& b) {
  return a.size == b.size && a.spacing_mm == b.spacing_mm && a.origin_mm == b.origin_mm &&
         a.axis == b.axis;
}

}  // namespace protondose
