#include "protondose/core/rigid_transform.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose {

Vec3 RigidTransform::apply(const Vec3& p) const {
  Vec3 out = rotate(p);
  for (int r = 0; r < 3; ++r) out[r] += translation_mm[r];
  return out;
}

Vec3 RigidTransform::rotate(const Vec3& v) const {
  Vec3 out{};
  for (int r = 0; r < 3; ++r) out[r] = rotation[r][0] * v[0] + rotation[r][1] * v[1] + rotation[r][2] * v[2];
  return out;
}

RigidTransform RigidTransform::inverse() const {
  RigidTransform inv;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) inv.rotation[r][c] = rotation[c][r];
  const Vec3 t = inv.rotate(translation_mm);
  inv.translation_mm = {-t[0], -t[1], -t[2]};
  return inv;
}

std::array<double, 16> RigidTransform::matrix_row_major() const {
  std::array<double, 16> m{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) m[4 * r + c] = rotation[r][c];
    m[4 * r + 3] = translation_mm[r];
  }
  m[15] = 1.0;
  return m;
}

bool RigidTransform::is_identity() const {
  for (int r = 0; r < 3; ++r) {
    if (translation_mm[r] != 0.0) return false;
    for (int c = 0; c < 3; ++c)
      if (rotation[r][c] != (r == c ? 1.0 : 0.0)) return false;
  }
  return true;
}

RigidTransform operator*(const RigidTransform& a, const RigidTransform& b) {
  RigidTransform m;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      double s = 0.0;
      for (int k = 0; k < 3; ++k) s += a.rotation[r][k] * b.rotation[k][c];
      m.rotation[r][c] = s;
    }
  m.translation_mm = a.apply(b.translation_mm);
  return m;
}

namespace {

using Mat3 = std::array<std::array<double, 3>, 3>;

/// The orthogonal factor of the polar decomposition of a near-rotation, by
/// Newton's iteration R ← (R + R⁻ᵀ)/2 (Higham, "Computing the polar
/// decomposition", SIAM J Sci Stat Comput 7:1160, 1986); from |RᵀR − I| ≤ 1e-5 it
/// converges to rounding in two or three steps.
Mat3 nearest_rotation(Mat3 r) {
  for (int iteration = 0; iteration < 20; ++iteration) {
    const double det = r[0][0] * (r[1][1] * r[2][2] - r[1][2] * r[2][1]) -
                       r[0][1] * (r[1][0] * r[2][2] - r[1][2] * r[2][0]) +
                       r[0][2] * (r[1][0] * r[2][1] - r[1][1] * r[2][0]);
    // R⁻ᵀ = cofactor matrix / det.
    Mat3 inv_t{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const int i1 = (i + 1) % 3, i2 = (i + 2) % 3, j1 = (j + 1) % 3, j2 = (j + 2) % 3;
        inv_t[i][j] = (r[i1][j1] * r[i2][j2] - r[i1][j2] * r[i2][j1]) / det;
      }
    double change = 0.0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const double next = 0.5 * (r[i][j] + inv_t[i][j]);
        change = std::max(change, std::abs(next - r[i][j]));
        r[i][j] = next;
      }
    if (change < 1e-16) break;
  }
  return r;
}

}  // namespace

RigidTransform rigid_transform_from_matrix(const std::array<double, 16>& v, const std::string& what) {
  for (int i = 0; i < 16; ++i)
    if (!std::isfinite(v[i])) {
      std::ostringstream m;
      m << what << ": element " << i + 1 << " of 16 is not finite (" << v[i] << ")";
      throw InputError(m.str());
    }
  constexpr double kLastRowTolerance = 1e-6;
  for (int c = 0; c < 4; ++c) {
    const double expected = c == 3 ? 1.0 : 0.0;
    if (std::abs(v[12 + c] - expected) > kLastRowTolerance) {
      std::ostringstream m;
      m << what << ": the last row is (" << v[12] << ", " << v[13] << ", " << v[14] << ", " << v[15]
        << "); a homogeneous matrix ends in (0, 0, 0, 1) within " << kLastRowTolerance;
      throw InputError(m.str());
    }
  }
  RigidTransform t;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) t.rotation[r][c] = v[4 * r + c];
    t.translation_mm[r] = v[4 * r + 3];
  }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double dot = 0.0;
      for (int k = 0; k < 3; ++k) dot += t.rotation[k][a] * t.rotation[k][b];
      const double deviation = dot - (a == b ? 1.0 : 0.0);
      if (std::abs(deviation) > kRigidTolerance) {
        std::ostringstream m;
        m << what << ": the 3 x 3 part is not a rotation: (R^T R)[" << a << "][" << b << "] = " << dot
          << ", expected " << (a == b ? 1 : 0) << " within " << kRigidTolerance
          << " (scaling or shear is not rigid)";
        throw InputError(m.str());
      }
    }
  const auto& R = t.rotation;
  const double det = R[0][0] * (R[1][1] * R[2][2] - R[1][2] * R[2][1]) -
                     R[0][1] * (R[1][0] * R[2][2] - R[1][2] * R[2][0]) +
                     R[0][2] * (R[1][0] * R[2][1] - R[1][1] * R[2][0]);
  if (det < 0) {
    std::ostringstream m;
    m << what << ": the 3 x 3 part has determinant " << det << " (a reflection); a rigid map has determinant +1";
    throw InputError(m.str());
  }
  t.rotation = nearest_rotation(t.rotation);
  return t;
}

}  // namespace protondose
