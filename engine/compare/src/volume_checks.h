#pragma once
// Input checks shared by the comparison functions (private to protondose_compare).

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "protondose/core/error.h"
#include "protondose/core/grid.h"

namespace protondose::compare::detail {

/// Throws InputError naming `what` if the grid is invalid, the data size does
/// not match it, or a value is NaN or infinite.
template <class T>
void check_volume(const Volume<T>& v, const std::string& what) {
  v.grid.validate(what);
  if (v.data.size() != v.grid.voxel_count()) {
    std::ostringstream m;
    m << what << ": holds " << v.data.size() << " values but its grid " << v.grid.size[0] << "x"
      << v.grid.size[1] << "x" << v.grid.size[2] << " has " << v.grid.voxel_count() << " voxels";
    throw InputError(m.str());
  }
  if constexpr (std::is_floating_point_v<T>) {
    for (std::size_t n = 0; n < v.data.size(); ++n) {
      if (!std::isfinite(v.data[n])) {
        const int i = static_cast<int>(n % v.grid.size[0]);
        const int j = static_cast<int>((n / v.grid.size[0]) % v.grid.size[1]);
        const int k = static_cast<int>(n / (static_cast<std::size_t>(v.grid.size[0]) * v.grid.size[1]));
        std::ostringstream m;
        m << what << ": voxel (" << i << ", " << j << ", " << k << ") holds " << v.data[n]
          << "; doses must be finite";
        throw InputError(m.str());
      }
    }
  }
}

/// Maximum of a non-empty float volume.
inline float max_value(const Volume<float>& v) {
  float m = v.data.empty() ? 0.0f : v.data[0];
  for (float x : v.data) m = x > m ? x : m;
  return m;
}

}  // namespace protondose::compare::detail
