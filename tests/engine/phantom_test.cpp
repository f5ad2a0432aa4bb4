#include "protondose/engine/phantom.h"

#include <gtest/gtest.h>

#include <cmath>

#include "protondose/core/error.h"

namespace pe = protondose::engine;

namespace {
protondose::IonPlan plan_with_isocentre(const protondose::Vec3& iso) {
  protondose::IonPlan p;
  p.label = "P";
  p.frame_of_reference_uid = "2.25.7";
  protondose::IonBeam b;
  b.isocenter_mm = iso;
  p.beams.push_back(b);
  return p;
}
}  // namespace

TEST(Phantom, BoxWithASlabIsCentredOnTheIsocentreInThePlansFrame) {
  pe::PhantomSpec s;
  s.box_size_mm = {100, 120, 80};
  s.margin_mm = 10;
  s.spacing_mm = 2;
  s.slabs.push_back(pe::parse_phantom_slab("y:-40:-20:1300"));
  const protondose::CtImage ct = pe::make_box_phantom(plan_with_isocentre({10, -5, 30}), s);
  EXPECT_EQ(ct.hu.grid.size, (std::array<int, 3>{60, 70, 50}));
  EXPECT_EQ(ct.frame_of_reference_uid, "2.25.7");
  EXPECT_EQ(ct.patient_position, "HFS");
  const auto hu_at = [&](double x, double y, double z) {
    const protondose::Vec3 c = ct.hu.grid.continuous_index({x, y, z});
    return ct.hu.at(static_cast<int>(std::lround(c[0])), static_cast<int>(std::lround(c[1])),
                    static_cast<int>(std::lround(c[2])));
  };
  EXPECT_FLOAT_EQ(hu_at(11, -4, 31), 0.0f);          // water at the isocentre
  EXPECT_FLOAT_EQ(hu_at(11, -5 - 31, 31), 1300.0f);  // in the slab
  EXPECT_FLOAT_EQ(hu_at(11, -5 - 65, 31), -1000.0f); // in the air margin in front of the box
  EXPECT_FLOAT_EQ(hu_at(10 + 55, -5, 31), -1000.0f); // beside the box
}

TEST(Phantom, RejectsMalformedSlab) {
  try {
    pe::parse_phantom_slab("w:1:2:3");
    FAIL() << "expected ConfigError";
  } catch (const protondose::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("axis 'w' is not x, y or z"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pe::parse_phantom_slab("y:5:2:3"), protondose::ConfigError);
  EXPECT_THROW(pe::parse_phantom_slab("y:1:2"), protondose::ConfigError);
  EXPECT_THROW(pe::parse_phantom_slab("y:1:2:bone"), protondose::ConfigError);
}

TEST(Phantom, RejectsPlanWithoutBeams) {
  protondose::IonPlan p;
  p.label = "empty";
  try {
    pe::make_box_phantom(p, {});
    FAIL() << "expected InputError";
  } catch (const protondose::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("plan 'empty' has no beams"), std::string::npos) << e.what();
  }
}
