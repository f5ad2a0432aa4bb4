// Spatial Registration (rigid) reading, and the map between two of its frames
// (PS3.3 C.20.2; semantics in spatial_registration.h).
#include "protondose/dicom/spatial_registration.h"

#include <array>
#include <cmath>

#include "dcmtk_util.h"
#include "protondose/core/error.h"

namespace protondose::dicom {

using detail::find_string;
using detail::require_numbers;
using detail::require_string;
using detail::sequence_items;
using detail::tag_label;
using detail::Where;

namespace {

/// The items of a required sequence; InputError naming the tag when it is absent or empty.
std::vector<DcmItem*> require_items(DcmItem& item, const DcmTagKey& key, const Where& where) {
  std::vector<DcmItem*> items = sequence_items(item, key);
  if (items.empty()) throw InputError(where.prefix() + tag_label(key) + ": required sequence is missing or has no items");
  return items;
}

/// One MatrixSequence item: its type checked (RIGID only) and its matrix rigid.
RigidTransform read_matrix(DcmItem& item, const Where& where) {
  const std::string type = require_string(item, DCM_FrameOfReferenceTransformationMatrixType, where);
  if (type == "RIGID_SCALE" || type == "AFFINE")
    throw UnavailableError(where.prefix() + tag_label(DCM_FrameOfReferenceTransformationMatrixType) + " is '" +
                           type + "': only RIGID registrations are supported (a scaled or sheared patient "
                           "cannot be treated with the plan's geometry)");
  if (type != "RIGID")
    throw InputError(where.prefix() + tag_label(DCM_FrameOfReferenceTransformationMatrixType) + " is '" + type +
                     "'; the defined terms are RIGID, RIGID_SCALE and AFFINE (only RIGID is supported)");
  const std::vector<double> values = require_numbers(item, DCM_FrameOfReferenceTransformationMatrix, 16, where);
  std::array<double, 16> m{};
  for (int i = 0; i < 16; ++i) m[i] = values[static_cast<std::size_t>(i)];
  return rigid_transform_from_matrix(m, where.prefix() + tag_label(DCM_FrameOfReferenceTransformationMatrix) +
                                            " (RIGID)");
}

bool nearly_equal(const RigidTransform& a, const RigidTransform& b) {
  const auto ma = a.matrix_row_major(), mb = b.matrix_row_major();
  for (int i = 0; i < 16; ++i)
    if (std::abs(ma[i] - mb[i]) > 1e-9 * (1.0 + std::abs(ma[i]))) return false;
  return true;
}

}  // namespace

SpatialRegistration read_spatial_registration(const std::string& path) {
  auto file = detail::load_file(path);
  const Where w{path, ""};
  const std::string sop_class = detail::sop_class_of(*file);
  if (sop_class == UID_DeformableSpatialRegistrationStorage)
    throw UnavailableError(w.prefix() + "a Deformable Spatial Registration (" + sop_class +
                           ") is not supported; give a rigid Spatial Registration (" +
                           UID_SpatialRegistrationStorage + ")");
  if (sop_class != UID_SpatialRegistrationStorage)
    throw InputError(w.prefix() + "not a Spatial Registration (" + tag_label(DCM_SOPClassUID) + " is '" + sop_class +
                     "', expected " + UID_SpatialRegistrationStorage + ")");
  DcmDataset& ds = *file->getDataset();
  SpatialRegistration reg;
  reg.path = path;
  reg.sop_instance_uid = find_string(ds, DCM_SOPInstanceUID, w).value_or("");
  reg.frame_of_reference_uid = require_string(ds, DCM_FrameOfReferenceUID, w);
  const std::vector<DcmItem*> items = require_items(ds, DCM_RegistrationSequence, w);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Where iw = w.with("RegistrationSequence item " + std::to_string(i + 1));
    RegistrationItem r;
    r.number = static_cast<int>(i + 1);
    r.frame_of_reference_uid = find_string(*items[i], DCM_FrameOfReferenceUID, iw).value_or("");
    const std::vector<DcmItem*> registrations = require_items(*items[i], DCM_MatrixRegistrationSequence, iw);
    if (registrations.size() != 1)
      throw InputError(iw.prefix() + tag_label(DCM_MatrixRegistrationSequence) + " has " +
                       std::to_string(registrations.size()) + " items; exactly 1 is allowed (PS3.3 C.20.2)");
    const std::vector<DcmItem*> matrices = require_items(*registrations[0], DCM_MatrixSequence, iw);
    // Equation C.20.2-2: M = M_n ··· M_2 · M_1, the first item applied to the point first.
    for (std::size_t k = 0; k < matrices.size(); ++k) {
      const Where mw = iw.with("MatrixSequence item " + std::to_string(k + 1));
      r.registered_from_source = read_matrix(*matrices[k], mw) * r.registered_from_source;
    }
    reg.items.push_back(std::move(r));
  }
  return reg;
}

RigidTransform registration_between(const SpatialRegistration& reg, const std::string& plan_frame_uid,
                                    const std::string& ct_frame_uid) {
  std::string related = "'" + reg.frame_of_reference_uid + "' (its own, the Registered RCS)";
  int unnamed = 0;
  for (const RegistrationItem& item : reg.items) {
    if (item.frame_of_reference_uid.empty()) {
      ++unnamed;
    } else if (item.frame_of_reference_uid != reg.frame_of_reference_uid) {
      related += ", '" + item.frame_of_reference_uid + "'";
    }
  }
  if (unnamed > 0)
    related += "; " + std::to_string(unnamed) + " item(s) name no " + tag_label(DCM_FrameOfReferenceUID) +
               " (only " + tag_label(DCM_ReferencedImageSequence) + ", not followed)";
  auto registered_from = [&](const std::string& uid, const char* role) {
    const RegistrationItem* found = nullptr;
    for (const RegistrationItem& item : reg.items) {
      if (item.frame_of_reference_uid != uid) continue;
      if (found && !nearly_equal(found->registered_from_source, item.registered_from_source))
        throw InputError("'" + reg.path + "': RegistrationSequence items " + std::to_string(found->number) + " and " +
                         std::to_string(item.number) + " register the " + role + "'s frame of reference '" + uid +
                         "' with different matrices");
      if (!found) found = &item;
    }
    if (found) return found->registered_from_source;
    if (!uid.empty() && uid == reg.frame_of_reference_uid) return RigidTransform{};
    throw InputError("'" + reg.path + "': the Spatial Registration does not relate the plan's frame of reference '" +
                     plan_frame_uid + "' to the CT's '" + ct_frame_uid + "': the " + role + "'s frame '" + uid +
                     "' is neither its own FrameOfReferenceUID nor that of a RegistrationSequence item; it relates " +
                     related);
  };
  const RigidTransform registered_from_plan = registered_from(plan_frame_uid, "plan");
  const RigidTransform registered_from_ct = registered_from(ct_frame_uid, "CT");
  return registered_from_ct.inverse() * registered_from_plan;
}

}  // namespace protondose::dicom
