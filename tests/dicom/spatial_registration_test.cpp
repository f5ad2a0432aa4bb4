// Spatial Registration reading (PS3.3 C.20.2): which way the matrices map,
// their composition order, the map between two frames, and every refusal
// naming the file, the tag and the value.
#include "protondose/dicom/spatial_registration.h"

#include <gtest/gtest.h>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "registration_writer.h"

namespace pd = protondose::dicom;
using protondose::RigidTransform;
using protondose::Vec3;
using protondose::testing::RegItem;
using protondose::testing::reg_rotation_z;
using protondose::testing::reg_translation;

namespace {

constexpr const char* kPlanFrame = "2.25.1001";
constexpr const char* kCtFrame = "2.25.1002";
constexpr const char* kOtherFrame = "2.25.1003";

void expect_point(const Vec3& got, const Vec3& want) {
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(got[c], want[c], 1e-9) << "component " << c;
}

}  // namespace

TEST(SpatialRegistration, AMatrixMapsItsItemsFrameIntoTheObjectsOwnFrame) {
  const std::string path = pd::test::scratch_dir() + "/reg.dcm";
  // Registered RCS = the CT's frame; the item registers the plan's frame onto it.
  protondose::testing::write_registration(path, kCtFrame, {{kPlanFrame, {{reg_translation(10, -20, 5)}}}});
  const pd::SpatialRegistration reg = pd::read_spatial_registration(path);
  EXPECT_EQ(reg.frame_of_reference_uid, kCtFrame);
  ASSERT_EQ(reg.items.size(), 1u);
  EXPECT_EQ(reg.items[0].frame_of_reference_uid, kPlanFrame);
  expect_point(reg.items[0].registered_from_source.apply({1, 2, 3}), {11, -18, 8});
  // ct_from_plan is that matrix; the other way round its inverse.
  expect_point(pd::registration_between(reg, kPlanFrame, kCtFrame).apply({1, 2, 3}), {11, -18, 8});
  expect_point(pd::registration_between(reg, kCtFrame, kPlanFrame).apply({11, -18, 8}), {1, 2, 3});
}

TEST(SpatialRegistration, MatrixSequenceItemsComposeWithTheFirstAppliedFirst) {
  // Equation C.20.2-2: M = M2 · M1. M1 translates by +10 x, M2 turns 90 deg about z:
  // (0,0,0) → (10,0,0) → (0,10,0). The other order would give (10,0,0).
  const std::string path = pd::test::scratch_dir() + "/reg.dcm";
  protondose::testing::write_registration(path, kCtFrame,
                                          {{kPlanFrame, {{reg_translation(10, 0, 0)}, {reg_rotation_z(90)}}}});
  const RigidTransform m = pd::registration_between(pd::read_spatial_registration(path), kPlanFrame, kCtFrame);
  expect_point(m.apply({0, 0, 0}), {0, 10, 0});
  expect_point(m.apply({1, 0, 0}), {0, 11, 0});
}

TEST(SpatialRegistration, CtFromPlanIsTheSameWhicheverFrameTheObjectRegistersOnto) {
  const std::string dir = pd::test::scratch_dir();
  const auto forward = reg_rotation_z(90, 4, -8, 12);  // ct_from_plan
  const RigidTransform expected =
      protondose::rigid_transform_from_matrix(forward, "expected");
  // (a) onto the CT's frame, with the usual identity item for the fixed frame;
  protondose::testing::write_registration(dir + "/a.dcm", kCtFrame,
                                          {{kCtFrame, {{reg_translation(0, 0, 0)}}}, {kPlanFrame, {{forward}}}});
  // (b) onto the plan's frame: the CT's item carries the inverse;
  protondose::testing::write_registration(dir + "/b.dcm", kPlanFrame,
                                          {{kCtFrame, {{expected.inverse().matrix_row_major()}}}});
  // (c) onto a third frame: plan → other by A, CT → other by B, so ct_from_plan = B⁻¹ A.
  const RigidTransform a = protondose::rigid_transform_from_matrix(reg_rotation_z(-30, 1, 2, 3), "a");
  const RigidTransform b = a * expected.inverse();
  protondose::testing::write_registration(dir + "/c.dcm", kOtherFrame,
                                          {{kPlanFrame, {{a.matrix_row_major()}}}, {kCtFrame, {{b.matrix_row_major()}}}});
  for (const char* name : {"/a.dcm", "/b.dcm", "/c.dcm"}) {
    SCOPED_TRACE(name);
    const RigidTransform got = pd::registration_between(pd::read_spatial_registration(dir + name), kPlanFrame, kCtFrame);
    for (const Vec3& p : {Vec3{0, 0, 0}, Vec3{100, -50, 25}}) {
      const Vec3 w = expected.apply(p), g = got.apply(p);
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(g[c], w[c], 1e-8);
    }
  }
}

TEST(SpatialRegistration, RefusesARegistrationThatDoesNotRelateThePlanAndCtFrames) {
  const std::string path = pd::test::scratch_dir() + "/reg.dcm";
  protondose::testing::write_registration(path, kOtherFrame, {{kCtFrame, {{reg_translation(1, 0, 0)}}}});
  const pd::SpatialRegistration reg = pd::read_spatial_registration(path);
  EXPECT_THROW_WITH(pd::registration_between(reg, kPlanFrame, kCtFrame), protondose::InputError, "reg.dcm",
                    "does not relate the plan's frame of reference '2.25.1001' to the CT's '2.25.1002'",
                    "it relates '2.25.1003' (its own, the Registered RCS), '2.25.1002'");
}

TEST(SpatialRegistration, RejectsAMatrixThatIsNotRigid) {
  const std::string dir = pd::test::scratch_dir();
  auto scaled = reg_translation(0, 0, 0);
  scaled[0] = 1.1;  // a 10 % scale along x, declared RIGID
  protondose::testing::write_registration(dir + "/scaled.dcm", kCtFrame, {{kPlanFrame, {{scaled}}}});
  EXPECT_THROW_WITH(pd::read_spatial_registration(dir + "/scaled.dcm"), protondose::InputError, "scaled.dcm",
                    "RegistrationSequence item 1, MatrixSequence item 1",
                    "FrameOfReferenceTransformationMatrix (3006,00c6)", "(R^T R)[0][0] = 1.21", "within 1e-05");
  auto mirrored = reg_translation(0, 0, 0);
  mirrored[0] = -1;
  protondose::testing::write_registration(dir + "/mirrored.dcm", kCtFrame, {{kPlanFrame, {{mirrored}}}});
  EXPECT_THROW_WITH(pd::read_spatial_registration(dir + "/mirrored.dcm"), protondose::InputError, "mirrored.dcm",
                    "determinant -1 (a reflection)");
  auto last_row = reg_translation(0, 0, 0);
  last_row[12] = 0.5;
  protondose::testing::write_registration(dir + "/row.dcm", kCtFrame, {{kPlanFrame, {{last_row}}}});
  EXPECT_THROW_WITH(pd::read_spatial_registration(dir + "/row.dcm"), protondose::InputError, "row.dcm",
                    "the last row is (0.5, 0, 0, 1)");
}

TEST(SpatialRegistration, RefusesRigidScaleAndAffineMatrixTypes) {
  const std::string dir = pd::test::scratch_dir();
  for (const char* type : {"RIGID_SCALE", "AFFINE"}) {
    const std::string path = dir + "/" + type + ".dcm";
    protondose::testing::write_registration(path, kCtFrame, {{kPlanFrame, {{reg_translation(0, 0, 0), type}}}});
    EXPECT_THROW_WITH(pd::read_spatial_registration(path), protondose::UnavailableError, path.c_str(),
                      "FrameOfReferenceTransformationMatrixType (0070,030c) is '", type, "only RIGID");
  }
  const std::string odd = dir + "/odd.dcm";
  protondose::testing::write_registration(odd, kCtFrame, {{kPlanFrame, {{reg_translation(0, 0, 0), "WARPED"}}}});
  EXPECT_THROW_WITH(pd::read_spatial_registration(odd), protondose::InputError, "is 'WARPED'",
                    "RIGID, RIGID_SCALE and AFFINE");
}

TEST(SpatialRegistration, NamesTheMissingTag) {
  const std::string dir = pd::test::scratch_dir();
  struct Case {
    const char* name;
    DcmTagKey tag;
    bool in_matrix;  // in the first MatrixSequence item, else at the top level
    const char* expected;
  };
  const Case cases[] = {
      {"matrix", DCM_FrameOfReferenceTransformationMatrix, true, "FrameOfReferenceTransformationMatrix (3006,00c6)"},
      {"type", DCM_FrameOfReferenceTransformationMatrixType, true, "FrameOfReferenceTransformationMatrixType (0070,030c)"},
      {"own_frame", DCM_FrameOfReferenceUID, false, "FrameOfReferenceUID (0020,0052)"},
      {"sequence", DCM_RegistrationSequence, false, "RegistrationSequence (0070,0308)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto file = protondose::testing::make_registration(kCtFrame, {{kPlanFrame, {{reg_translation(1, 2, 3)}}}});
    DcmItem* where = c.in_matrix ? protondose::testing::registration_matrix_item(*file) : file->getDataset();
    ASSERT_TRUE(where->findAndDeleteElement(c.tag).good());
    const std::string path = dir + "/" + c.name + ".dcm";
    protondose::testing::save_registration(*file, path);
    EXPECT_THROW_WITH(pd::read_spatial_registration(path), protondose::InputError, path.c_str(), c.expected,
                      "missing");
  }
  // A matrix of 12 values, not 16.
  auto file = protondose::testing::make_registration(kCtFrame, {{kPlanFrame, {{reg_translation(1, 2, 3)}}}});
  ASSERT_TRUE(protondose::testing::registration_matrix_item(*file)
                  ->putAndInsertString(DCM_FrameOfReferenceTransformationMatrix, "1\\0\\0\\0\\0\\1\\0\\0\\0\\0\\1\\0")
                  .good());
  protondose::testing::save_registration(*file, dir + "/short.dcm");
  EXPECT_THROW_WITH(pd::read_spatial_registration(dir + "/short.dcm"), protondose::InputError,
                    "FrameOfReferenceTransformationMatrix (3006,00c6)", "expected 16 values, found 12");
}

TEST(SpatialRegistration, RefusesOtherSopClassesByName) {
  const std::string dir = pd::test::scratch_dir();
  auto file = protondose::testing::make_registration(kCtFrame, {{kPlanFrame, {{reg_translation(0, 0, 0)}}}});
  ASSERT_TRUE(file->getDataset()->putAndInsertString(DCM_SOPClassUID, UID_DeformableSpatialRegistrationStorage).good());
  protondose::testing::save_registration(*file, dir + "/deformable.dcm");
  EXPECT_THROW_WITH(pd::read_spatial_registration(dir + "/deformable.dcm"), protondose::UnavailableError,
                    "deformable.dcm", "Deformable Spatial Registration", "not supported");
  ASSERT_TRUE(file->getDataset()->putAndInsertString(DCM_SOPClassUID, UID_CTImageStorage).good());
  protondose::testing::save_registration(*file, dir + "/ct.dcm");
  EXPECT_THROW_WITH(pd::read_spatial_registration(dir + "/ct.dcm"), protondose::InputError, "ct.dcm",
                    "not a Spatial Registration", "1.2.840.10008.5.1.4.1.1.66.1");
}
