#pragma once
/// \file spatial_registration.h
/// DICOM Spatial Registration objects (SOP Class 1.2.840.10008.5.1.4.1.1.66.1,
/// PS3.3 A.39.1 and C.20.2), rigid matrices only: which frame of reference maps
/// onto which, and the rigid map between two frames (docs/dicom.md).
///
/// Semantics (PS3.3 C.20.2 and C.20.2.1.1): the object establishes the
/// *Registered RCS*, its own FrameOfReferenceUID (0020,0052). Each item of
/// RegistrationSequence (0070,0308) "defines a spatial registration of the
/// images referenced in that Item to the Registered RCS"; its
/// FrameOfReferenceUID (0020,0052) names the *Source RCS*. Its
/// MatrixSequence (0070,030A) "specifies one transformation, that registers the
/// Source RCS/images to the Registered RCS"; a FrameOfReferenceTransformationMatrix
/// (3006,00C6) ᴬM_B "describes how to transform a point (ᴮx, ᴮy, ᴮz) with
/// respect to RCS_B into (ᴬx, ᴬy, ᴬz) with respect to RCS_A", A being the
/// Registered RCS and B the Source RCS. Several MatrixSequence items compose
/// in item order, Equation C.20.2-2: ᴬM_B = M₃ · M₂ · M₁ (the first item is
/// applied to the point first). Matrices are 4 × 4, row-major, in mm.

#include <string>
#include <vector>

#include "protondose/core/rigid_transform.h"

namespace protondose::dicom {

/// One RegistrationSequence item.
struct RegistrationItem {
  int number = 0;                       ///< 1-based position in RegistrationSequence
  /// FrameOfReferenceUID (0020,0052) of the item: its Source RCS. Empty when
  /// the item identifies its images only by ReferencedImageSequence (0008,1140).
  std::string frame_of_reference_uid;
  /// Registered RCS ← Source RCS: the MatrixSequence items composed (M_n ··· M₁).
  RigidTransform registered_from_source;
};

/// A Spatial Registration object with rigid matrices.
struct SpatialRegistration {
  std::string path;                    ///< the file (for messages)
  std::string sop_instance_uid;
  std::string frame_of_reference_uid;  ///< the Registered RCS (the object's own FrameOfReferenceUID)
  std::vector<RegistrationItem> items;
};

/// Reads a Spatial Registration. Throws IoError (unreadable file), InputError
/// naming the file, the item and the tag (not a Spatial Registration; a
/// missing RegistrationSequence, MatrixRegistrationSequence, MatrixSequence,
/// FrameOfReferenceTransformationMatrix (16 values) or
/// FrameOfReferenceTransformationMatrixType, or the object's own
/// FrameOfReferenceUID; a matrix that is not finite, not rigid within
/// kRigidTolerance, a reflection, or whose last row is not 0 0 0 1; an
/// unknown matrix type) and UnavailableError naming the file and the value
/// for a matrix type RIGID_SCALE or AFFINE and for a Deformable Spatial
/// Registration (1.2.840.10008.5.1.4.1.1.66.3): only RIGID is supported.
SpatialRegistration read_spatial_registration(const std::string& path);

/// The rigid map ct_from_plan from the plan's frame `plan_frame_uid` onto the
/// CT's frame `ct_frame_uid`: inverse(registered_from(CT)) · registered_from(plan), where
/// registered_from(F) is the matrix of the item whose FrameOfReferenceUID is
/// F, or the identity when F is the Registered RCS itself and no item names
/// it. Throws InputError naming the file and both UIDs (and the frames the
/// object does relate) when either frame is not related, and naming the UID
/// when two items name the same frame with different matrices.
RigidTransform registration_between(const SpatialRegistration& registration, const std::string& plan_frame_uid,
                                    const std::string& ct_frame_uid);

}  // namespace protondose::dicom
