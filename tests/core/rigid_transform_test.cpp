#include "protondose/core/rigid_transform.h"

#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "protondose/core/error.h"

using protondose::RigidTransform;
using protondose::testing::message_of;

TEST(RigidTransform, InverseAndCompositionUndoEachOther) {
  // 90 deg about z, then +(1, 2, 3) mm.
  const RigidTransform t = protondose::rigid_transform_from_matrix(
      {0, -1, 0, 1, 1, 0, 0, 2, 0, 0, 1, 3, 0, 0, 0, 1}, "test");
  const protondose::Vec3 p = t.apply({10, 0, 0});
  EXPECT_EQ(p, (protondose::Vec3{1, 12, 3}));
  EXPECT_EQ(t.inverse().apply(p), (protondose::Vec3{10, 0, 0}));
  EXPECT_TRUE((t.inverse() * t).is_identity());
  // (a * b) applies b first.
  const RigidTransform shift = protondose::rigid_transform_from_matrix(
      {1, 0, 0, 5, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, "shift");
  EXPECT_EQ((t * shift).apply({0, 0, 0}), (protondose::Vec3{1, 7, 3}));
  EXPECT_EQ((shift * t).apply({0, 0, 0}), (protondose::Vec3{6, 2, 3}));
  EXPECT_EQ(t.matrix_row_major()[3], 1.0);
  EXPECT_EQ(t.matrix_row_major()[15], 1.0);
}

TEST(RigidTransform, RejectsScalingShearReflectionAndNonFiniteValues) {
  EXPECT_NE(message_of<protondose::InputError>([] {
              protondose::rigid_transform_from_matrix({1, 0.1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, "M");
            }).find("M: the 3 x 3 part is not a rotation"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::InputError>([] {
              protondose::rigid_transform_from_matrix({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, -1, 0, 0, 0, 0, 1}, "M");
            }).find("determinant -1"),
            std::string::npos);
  EXPECT_NE(message_of<protondose::InputError>([] {
              protondose::rigid_transform_from_matrix({1, 0, 0, NAN, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, "M");
            }).find("element 4 of 16 is not finite"),
            std::string::npos);
}

TEST(RigidTransform, ARotationWrittenWithSixDecimalsBecomesExactlyOrthonormal) {
  // cos 30° and sin 30° to six decimals: R^T R deviates from I by about 1e-7.
  const RigidTransform t = protondose::rigid_transform_from_matrix(
      {0.866025, -0.5, 0, 10, 0.5, 0.866025, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, "rounded");
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double dot = 0;
      for (int k = 0; k < 3; ++k) dot += t.rotation[k][a] * t.rotation[k][b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-15);
    }
  EXPECT_NEAR(t.rotation[0][0], 0.866025, 1e-6);
  EXPECT_NEAR(t.rotation[1][0], 0.5, 1e-6);
  EXPECT_EQ(t.translation_mm[0], 10.0);
  // There and back lands on the point, to rounding.
  const protondose::Vec3 p{123.4, -56.7, 89.0};
  const protondose::Vec3 q = t.inverse().apply(t.apply(p));
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(q[c], p[c], 1e-12);
}
