#pragma once
/// \file rigid_transform.h
/// A rigid map between two patient frames of reference (rotation and
/// translation, mm), e.g. the plan's frame onto a new CT's from a DICOM
/// Spatial Registration. Named by frames, "to_from": ct_from_plan maps a point
/// given in the plan's frame onto the same anatomical point in the CT's frame.

#include <array>
#include <string>

#include "protondose/core/grid.h"

namespace protondose {

/// p_to = rotation · p_from + translation_mm. The rotation is proper and
/// orthonormal (readers check it, within kRigidTolerance); the map is the
/// 4 × 4 homogeneous matrix [rotation translation; 0 0 0 1].
struct RigidTransform {
  /// rotation[r][c], row-major: out[r] = Σ_c rotation[r][c]·in[c].
  std::array<std::array<double, 3>, 3> rotation{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  Vec3 translation_mm{0, 0, 0};  ///< mm, in the destination frame

  /// Maps a point (mm): rotation · p + translation.
  Vec3 apply(const Vec3& point_mm) const;
  /// Maps a direction (no translation): rotation · v.
  Vec3 rotate(const Vec3& direction) const;
  /// The inverse map (rotationᵀ, −rotationᵀ · translation).
  RigidTransform inverse() const;
  /// The 16 values of the homogeneous matrix, row-major (last row 0 0 0 1).
  std::array<double, 16> matrix_row_major() const;
  bool is_identity() const;
};

/// Largest accepted |RᵀR − I| element of a rigid rotation read from a file;
/// 16-character DS values carry far more precision than this.
inline constexpr double kRigidTolerance = 1e-5;

/// The composition a ∘ b: apply b, then a (to_from = a_to_mid * b_mid_from).
RigidTransform operator*(const RigidTransform& a, const RigidTransform& b);

/// The homogeneous matrix (row-major) as a RigidTransform. Throws InputError,
/// prefixed by `what`, when a value is not finite, the last row is not
/// 0 0 0 1 (within 1e-6), the 3 × 3 part is not orthonormal (an element of
/// RᵀR − I beyond kRigidTolerance: scaling or shear) or is a reflection
/// (determinant < 0); the message names the offending value and the accepted range.
/// An accepted 3 × 3 part is replaced by its nearest rotation (the orthogonal
/// polar factor; it moves an element by about as much as RᵀR deviates from I,
/// ≤ 1e-5: 3 µm at 300 mm), so that inverse() is exact to rounding and a grid
/// mapped there and back lands on itself; the translation is kept.
RigidTransform rigid_transform_from_matrix(const std::array<double, 16>& row_major, const std::string& what);

}  // namespace protondose
