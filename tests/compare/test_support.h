#pragma once
// Helpers shared by the compare tests: analytic dose volumes and output folders.

#include <filesystem>
#include <functional>
#include <string>

#include "protondose/core/grid.h"

namespace protondose::compare::testing {

/// A fresh, empty folder under the build's test-output directory.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(PROTONDOSE_TEST_OUTPUT_DIR) / "compare" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Axis-aligned grid of n³ voxels of `spacing_mm`, first voxel centre at `origin`.
inline Grid3 cube_grid(int n, double spacing_mm, Vec3 origin = {0.0, 0.0, 0.0}) {
  Grid3 g;
  g.size = {n, n, n};
  g.spacing_mm = {spacing_mm, spacing_mm, spacing_mm};
  g.origin_mm = origin;
  return g;
}

/// A volume whose voxel values are f(x, y, z) at the voxel centres (mm).
inline Volume<float> fill(const Grid3& g, const std::function<double(const Vec3&)>& f) {
  Volume<float> v(g);
  for (int k = 0; k < g.size[2]; ++k)
    for (int j = 0; j < g.size[1]; ++j)
      for (int i = 0; i < g.size[0]; ++i) v.at(i, j, k) = static_cast<float>(f(g.position_mm(i, j, k)));
  return v;
}

}  // namespace protondose::compare::testing
