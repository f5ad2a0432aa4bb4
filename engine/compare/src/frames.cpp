#include "protondose/compare/frames.h"

#include "protondose/core/error.h"

namespace protondose::compare {

void require_same_frame_of_reference(const std::string& what_a, const std::string& uid_a,
                                     const std::string& what_b, const std::string& uid_b) {
  if (!uid_a.empty() && !uid_b.empty() && uid_a != uid_b) {
    throw InputError(what_a + " has FrameOfReferenceUID (0020,0052) " + uid_a + " but " + what_b + " has " +
                     uid_b + "; they are not in the same patient frame");
  }
}

}  // namespace protondose::compare
