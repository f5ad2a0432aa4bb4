#pragma once
/// \file frames.h
/// Consistency of the patient frames of the objects being compared.

#include <string>

namespace protondose::compare {

/// Throws InputError naming both objects and both UIDs when both
/// FrameOfReferenceUIDs are known (non-empty) and differ: the doses (or dose and
/// plan, structure set, CT) are then not in the same patient coordinate frame,
/// and comparing them voxel by voxel would be meaningless. An empty UID (e.g. a
/// MetaImage, which carries none) is not checked.
void require_same_frame_of_reference(const std::string& what_a, const std::string& uid_a,
                                     const std::string& what_b, const std::string& uid_b);

}  // namespace protondose::compare
