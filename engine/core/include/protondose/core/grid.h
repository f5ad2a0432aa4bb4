#pragma once
/// \file grid.h
/// Regular 3D voxel grids in the DICOM patient frame, and volumes on them.

#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace protondose {

/// A point or direction in a named frame; components in mm where a length.
using Vec3 = std::array<double, 3>;

inline double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

/// A regular voxel grid in the DICOM patient coordinate system (mm).
///
/// Voxel (i, j, k) has its centre at
///   origin_mm + i·spacing_mm[0]·axis[0] + j·spacing_mm[1]·axis[1] + k·spacing_mm[2]·axis[2].
/// Data on the grid are stored with i fastest, then j, then k (DICOM order:
/// column, row, slice).
struct Grid3 {
  std::array<int, 3> size{0, 0, 0};          ///< voxels along i, j, k
  Vec3 spacing_mm{1.0, 1.0, 1.0};            ///< voxel pitch along i, j, k (mm, > 0)
  Vec3 origin_mm{0.0, 0.0, 0.0};             ///< centre of voxel (0,0,0), patient frame (mm)
  /// Unit direction of the i, j, k axes in the patient frame (axis[0] is the
  /// direction of increasing i). Identity for an axial HFS CT.
  std::array<Vec3, 3> axis{{{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}, {0.0, 0.0, 1.0}}};

  std::size_t voxel_count() const {
    return static_cast<std::size_t>(size[0]) * size[1] * size[2];
  }
  /// Linear index of voxel (i, j, k); no bounds check.
  std::size_t index(int i, int j, int k) const {
    return (static_cast<std::size_t>(k) * size[1] + j) * size[0] + i;
  }
  /// Patient-frame position (mm) of the centre of voxel (i, j, k) — fractional
  /// indices allowed.
  Vec3 position_mm(double i, double j, double k) const;
  /// Continuous voxel index (i, j, k) of a patient-frame point (mm).
  Vec3 continuous_index(const Vec3& point_mm) const;
  /// True when the axes are the identity (no rotation or flip).
  bool axis_aligned() const;
  /// Throws InputError naming `what` if sizes or spacings are not positive or
  /// the axes are not orthonormal.
  void validate(const std::string& what) const;
};

bool operator==(const Grid3& a, const Grid3& b);
inline bool operator!=(const Grid3& a, const Grid3& b) { return !(a == b); }

/// Values on a Grid3, i fastest. T is float for doses and CT numbers.
template <class T>
struct Volume {
  Grid3 grid;
  std::vector<T> data;  ///< data[grid.index(i,j,k)]

  Volume() = default;
  explicit Volume(const Grid3& g, T fill = T{}) : grid(g), data(g.voxel_count(), fill) {}

  T& at(int i, int j, int k) { return data[grid.index(i, j, k)]; }
  const T& at(int i, int j, int k) const { return data[grid.index(i, j, k)]; }
};

}  // namespace protondose
