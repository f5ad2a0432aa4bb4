#include "protondose/compare/frames.h"

#include <gtest/gtest.h>

#include "protondose/core/error.h"

namespace protondose::compare {
namespace {

TEST(FrameOfReference, MismatchedUidsAreAnInputErrorNamingBothObjects) {
  try {
    require_same_frame_of_reference("reference ref.dcm", "1.2.3", "test test.dcm", "1.2.4");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("reference ref.dcm has FrameOfReferenceUID (0020,0052) 1.2.3"), std::string::npos) << m;
    EXPECT_NE(m.find("test test.dcm has 1.2.4"), std::string::npos) << m;
  }
}

TEST(FrameOfReference, EqualOrUnknownUidsPass) {
  EXPECT_NO_THROW(require_same_frame_of_reference("a", "1.2.3", "b", "1.2.3"));
  EXPECT_NO_THROW(require_same_frame_of_reference("a", "", "b", "1.2.3"));  // MetaImage: no UID
  EXPECT_NO_THROW(require_same_frame_of_reference("a", "1.2.3", "b", ""));
}

}  // namespace
}  // namespace protondose::compare
