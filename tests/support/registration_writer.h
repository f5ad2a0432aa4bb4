#pragma once
// Synthetic DICOM Spatial Registration files for the tests, built with DCMTK
// directly (dicom/ has no REG writer: protondose only reads them). A test may
// take the DcmFileFormat from make_registration(), remove or change one
// element and save it, to check the reader names that element.
#include <dcmtk/config/osconfig.h>
#include <dcmtk/dcmdata/dctk.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace protondose::testing {

/// One MatrixSequence item: 16 values, row-major, and its type.
struct RegMatrix {
  std::array<double, 16> values;
  std::string type = "RIGID";
};

/// One RegistrationSequence item: the Source RCS and its matrices (applied in order).
struct RegItem {
  std::string frame_uid;
  std::vector<RegMatrix> matrices;
};

inline std::array<double, 16> reg_translation(double x_mm, double y_mm, double z_mm) {
  return {1, 0, 0, x_mm, 0, 1, 0, y_mm, 0, 0, 1, z_mm, 0, 0, 0, 1};
}

/// Rotation by angle_deg about patient z (right-handed: +x turns towards +y), then translation.
inline std::array<double, 16> reg_rotation_z(double angle_deg, double x_mm = 0, double y_mm = 0, double z_mm = 0) {
  double c = std::cos(angle_deg * 3.14159265358979323846 / 180.0), s = std::sin(angle_deg * 3.14159265358979323846 / 180.0);
  if (std::abs(c) < 1e-15) c = 0;
  if (std::abs(s) < 1e-15) s = 0;
  return {c, -s, 0, x_mm, s, c, 0, y_mm, 0, 0, 1, z_mm, 0, 0, 0, 1};
}

inline void reg_check(const OFCondition& c, const char* what) {
  if (c.bad()) throw std::runtime_error(std::string("test REG writer: ") + what + ": " + c.text());
}

inline std::string reg_ds(const std::array<double, 16>& v) {
  std::string text;
  for (int i = 0; i < 16; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.12g", v[i] == 0.0 ? 0.0 : v[i]);
    text += (i ? "\\" : "") + std::string(buf);
  }
  return text;
}

/// A Spatial Registration whose own FrameOfReferenceUID (the Registered RCS) is `own_frame_uid`.
inline std::unique_ptr<DcmFileFormat> make_registration(const std::string& own_frame_uid,
                                                        const std::vector<RegItem>& items) {
  auto file = std::make_unique<DcmFileFormat>();
  DcmDataset& ds = *file->getDataset();
  reg_check(ds.putAndInsertString(DCM_SOPClassUID, UID_SpatialRegistrationStorage), "SOPClassUID");
  reg_check(ds.putAndInsertString(DCM_SOPInstanceUID, "2.25.77001"), "SOPInstanceUID");
  reg_check(ds.putAndInsertString(DCM_Modality, "REG"), "Modality");
  reg_check(ds.putAndInsertString(DCM_PatientID, "BATCH"), "PatientID");
  reg_check(ds.putAndInsertString(DCM_FrameOfReferenceUID, own_frame_uid.c_str()), "FrameOfReferenceUID");
  for (std::size_t i = 0; i < items.size(); ++i) {
    DcmItem* item = nullptr;
    reg_check(ds.findOrCreateSequenceItem(DCM_RegistrationSequence, item, static_cast<signed long>(i)),
              "RegistrationSequence");
    if (!items[i].frame_uid.empty())
      reg_check(item->putAndInsertString(DCM_FrameOfReferenceUID, items[i].frame_uid.c_str()), "item FoR");
    DcmItem* mreg = nullptr;
    reg_check(item->findOrCreateSequenceItem(DCM_MatrixRegistrationSequence, mreg, 0), "MatrixRegistrationSequence");
    for (std::size_t k = 0; k < items[i].matrices.size(); ++k) {
      DcmItem* m = nullptr;
      reg_check(mreg->findOrCreateSequenceItem(DCM_MatrixSequence, m, static_cast<signed long>(k)), "MatrixSequence");
      reg_check(m->putAndInsertString(DCM_FrameOfReferenceTransformationMatrix, reg_ds(items[i].matrices[k].values).c_str()),
                "FrameOfReferenceTransformationMatrix");
      reg_check(m->putAndInsertString(DCM_FrameOfReferenceTransformationMatrixType, items[i].matrices[k].type.c_str()),
                "FrameOfReferenceTransformationMatrixType");
    }
  }
  return file;
}

inline void save_registration(DcmFileFormat& file, const std::string& path) {
  reg_check(file.saveFile(path.c_str(), EXS_LittleEndianExplicit), "saveFile");
}

inline void write_registration(const std::string& path, const std::string& own_frame_uid,
                               const std::vector<RegItem>& items) {
  save_registration(*make_registration(own_frame_uid, items), path);
}

/// The first MatrixSequence item of RegistrationSequence item `index` (to edit a file's matrix).
inline DcmItem* registration_matrix_item(DcmFileFormat& file, long index = 0) {
  DcmItem* item = nullptr;
  DcmItem* mreg = nullptr;
  DcmItem* m = nullptr;
  reg_check(file.getDataset()->findOrCreateSequenceItem(DCM_RegistrationSequence, item, index), "item");
  reg_check(item->findOrCreateSequenceItem(DCM_MatrixRegistrationSequence, mreg, 0), "mreg");
  reg_check(mreg->findOrCreateSequenceItem(DCM_MatrixSequence, m, 0), "matrix");
  return m;
}

}  // namespace protondose::testing
