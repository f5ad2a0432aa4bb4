#include "protondose/engine/geometry.h"

#include <gtest/gtest.h>

#include <cmath>

#include "protondose/core/error.h"

namespace pe = protondose::engine;
using protondose::Vec3;

namespace {

void expect_near(const Vec3& a, const Vec3& b, const char* what) {
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(a[c], b[c], 1e-9) << what << " component " << c;
}

}  // namespace

TEST(BeamFrame, HfsGantry0TravelsPosteriorWithXAlongPatientXAndYAlongPatientZ) {
  const pe::BeamFrame f(0, 0, {0, 0, 0}, pe::PatientPosition::kHfs);
  expect_near(f.direction_patient(), {0, 1, 0}, "beam direction");
  expect_near(f.x_axis_patient(), {1, 0, 0}, "IEC gantry X");
  expect_near(f.y_axis_patient(), {0, 0, 1}, "IEC gantry Y");
  // A point 10 mm posterior of the isocentre lies 10 mm downstream.
  expect_near(f.beam_from_patient({0, 10, 0}), {0, 0, 10}, "posterior point");
  expect_near(f.beam_from_patient({3, 0, -7}), {3, -7, 0}, "lateral point");
}

TEST(BeamFrame, HfsGantry90ComesFromPatientLeftAndTravelsMinusX) {
  const pe::BeamFrame f(90, 0, {0, 0, 0}, pe::PatientPosition::kHfs);
  expect_near(f.direction_patient(), {-1, 0, 0}, "beam direction");
  // The patient's left (+x) is upstream of the isocentre.
  EXPECT_NEAR(f.beam_from_patient({50, 0, 0})[2], -50, 1e-9);
  // IEC gantry Y stays along the gantry axis (patient superior for HFS).
  expect_near(f.y_axis_patient(), {0, 0, 1}, "IEC gantry Y");
}

TEST(BeamFrame, HfsGantry180TravelsAnteriorAndGantry270FromPatientRight) {
  expect_near(pe::BeamFrame(180, 0, {0, 0, 0}, pe::PatientPosition::kHfs).direction_patient(), {0, -1, 0}, "G180");
  expect_near(pe::BeamFrame(270, 0, {0, 0, 0}, pe::PatientPosition::kHfs).direction_patient(), {1, 0, 0}, "G270");
  expect_near(pe::BeamFrame(-90, 0, {0, 0, 0}, pe::PatientPosition::kHfs).direction_patient(), {1, 0, 0}, "G-90");
}

TEST(BeamFrame, Gantry45DirectionIsDiagonal) {
  const pe::BeamFrame f(45, 0, {0, 0, 0}, pe::PatientPosition::kHfs);
  const double h = std::sqrt(0.5);
  expect_near(f.direction_patient(), {-h, h, 0}, "G45 HFS");
}

TEST(BeamFrame, IsocentreMapsToBeamOriginAndRoundTrips) {
  const Vec3 iso{12.5, -30, 101};
  const pe::BeamFrame f(33, 17, iso, pe::PatientPosition::kFfp);
  expect_near(f.beam_from_patient(iso), {0, 0, 0}, "isocentre");
  const Vec3 p{-40, 22.2, 7};
  expect_near(f.patient_from_beam(f.beam_from_patient(p)), p, "round trip");
}

TEST(BeamFrame, PatientPositionsAtGantry0) {
  // Gantry 0 beams travel down (−Z_f): posterior for supine, anterior for prone.
  expect_near(pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kFfs).direction_patient(), {0, 1, 0}, "FFS");
  expect_near(pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kHfp).direction_patient(), {0, -1, 0}, "HFP");
  expect_near(pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kFfp).direction_patient(), {0, -1, 0}, "FFP");
  // Feet first: IEC gantry Y (towards the gantry) points to the patient's feet.
  expect_near(pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kFfs).y_axis_patient(), {0, 0, -1}, "FFS Y");
  expect_near(pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kFfs).x_axis_patient(), {-1, 0, 0}, "FFS X");
  expect_near(pe::BeamFrame(0, 0, {0, 0, 0}, pe::PatientPosition::kHfp).x_axis_patient(), {-1, 0, 0}, "HFP X");
  // Gantry 90 for FFS: the source sits on +X_f, which is the patient's right.
  expect_near(pe::BeamFrame(90, 0, {0, 0, 0}, pe::PatientPosition::kFfs).direction_patient(), {1, 0, 0}, "FFS G90");
}

TEST(BeamFrame, CouchRotationTurnsThePatientUnderAFixedGantry) {
  // Couch 90 (IEC: counter-clockwise from above) turns the HFS patient's head
  // from +Y_f to −X_f; a gantry-90 beam (travelling −X_f) then runs from the
  // patient's feet to the head: along patient +z.
  const pe::BeamFrame f(90, 90, {0, 0, 0}, pe::PatientPosition::kHfs);
  expect_near(f.direction_patient(), {0, 0, 1}, "G90 C90 HFS");
  // At gantry 0 the couch only rotates about the beam axis: the feet now point
  // to +X_f, so IEC gantry X runs towards the feet (patient −z).
  expect_near(pe::BeamFrame(0, 90, {0, 0, 0}, pe::PatientPosition::kHfs).direction_patient(), {0, 1, 0}, "G0 C90");
  expect_near(pe::BeamFrame(0, 90, {0, 0, 0}, pe::PatientPosition::kHfs).x_axis_patient(), {0, 0, -1}, "G0 C90 X");
}

TEST(BeamFrame, RejectsNonFiniteAngle) {
  try {
    const pe::BeamFrame f(std::nan(""), 0, {0, 0, 0}, pe::PatientPosition::kHfs);
    (void)f;
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gantry angle"), std::string::npos) << e.what();
  }
}

TEST(PatientPosition, ParsesTheFourSupportedValuesAndRejectsOthers) {
  EXPECT_EQ(pe::parse_patient_position("HFS"), pe::PatientPosition::kHfs);
  EXPECT_EQ(pe::parse_patient_position("FFP"), pe::PatientPosition::kFfp);
  EXPECT_STREQ(pe::patient_position_name(pe::PatientPosition::kHfp), "HFP");
  try {
    pe::parse_patient_position("HFDL");
    FAIL() << "expected UnavailableError";
  } catch (const protondose::UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("'HFDL'"), std::string::npos) << e.what();
  }
  try {
    pe::parse_patient_position("");
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("PatientPosition"), std::string::npos) << e.what();
  }
}
