#pragma once
/// \file rt_dose.h
/// Reading and writing DICOM RT Dose (dose grids).

#include <optional>
#include <string>

#include "protondose/core/grid.h"
#include "protondose/core/plan.h"

namespace protondose::dicom {

/// An RT Dose instance: the dose grid and its identity.
struct RtDose {
  /// Dose (Gy) = stored pixel × DoseGridScaling, on the grid the file states
  /// (origin = ImagePositionPatient, axes from ImageOrientationPatient,
  /// frame k at GridFrameOffsetVector[k] along the normal), i fastest.
  Volume<float> dose_gy;
  std::string units;                    ///< DoseUnits (GY, RELATIVE)
  std::string type;                     ///< DoseType (PHYSICAL, EFFECTIVE, ERROR)
  std::string summation_type;           ///< DoseSummationType (PLAN, BEAM, FRACTION, ...)
  std::string referenced_plan_uid;      ///< ReferencedRTPlanSequence ReferencedSOPInstanceUID
  std::string frame_of_reference_uid;
  std::string study_instance_uid;
  double dose_grid_scaling = 0.0;       ///< DoseGridScaling (Gy per pixel unit): the quantisation step
};

/// Reads an RT Dose file (single- or multi-frame, 16- or 32-bit unsigned
/// pixels; GridFrameOffsetVector relative to the first frame (first value 0)
/// or absolute (first value = ImagePositionPatient along the normal)).
/// Throws IoError (unreadable), InputError (not RT Dose, missing
/// DoseGridScaling / GridFrameOffsetVector / geometry, non-uniform frame
/// offsets, truncated pixel data; message names file and tag),
/// UnavailableError (oblique grid, signed or compressed pixels).
RtDose read_rt_dose(const std::string& path);

/// How the dose is labelled.
enum class DoseTypeOption {
  kPhysical,   ///< DoseType PHYSICAL
  kEffective,  ///< DoseType EFFECTIVE: the caller already multiplied by rbe_factor
};
enum class DoseSummationOption {
  kPlan,  ///< DoseSummationType PLAN
  kBeam,  ///< DoseSummationType BEAM, with ReferencedBeamNumber
};

/// Options of write_rt_dose.
struct RtDoseWriteOptions {
  /// The plan the dose belongs to: its SOPInstanceUID goes into
  /// ReferencedRTPlanSequence; Study, FrameOfReference and patient identity
  /// are copied from it (when ct is given, from the CT, which must agree).
  /// Required; must outlive the call.
  const IonPlan* plan = nullptr;
  /// Optional CT (identity only; the pixel data are not used).
  const CtImage* ct = nullptr;
  DoseTypeOption dose_type = DoseTypeOption::kPhysical;
  /// The constant RBE the caller applied, required when dose_type is
  /// kEffective (written in DoseComment).
  std::optional<double> rbe_factor;
  DoseSummationOption summation = DoseSummationOption::kPlan;
  int referenced_beam_number = 0;  ///< required (> 0) for kBeam
  /// false (default): 32-bit unsigned pixels, as RayStation and Eclipse write;
  /// true: 16-bit unsigned pixels (coarser quantum: max/65535).
  bool sixteen_bit = false;
  /// Optional DICOM file (typically the plan file) whose Patient and General
  /// Study attributes (PatientName/ID/BirthDate/Sex, StudyDate/Time/ID,
  /// StudyDescription, ReferringPhysicianName, AccessionNumber) are copied,
  /// so that the dose is one entity with its plan and CT for a TPS import.
  /// Its StudyInstanceUID must equal the one the dose gets (InputError).
  std::string copy_patient_and_study_from;
  std::string series_description = "protondose dose";
  std::string manufacturer = "protondose";
};

/// Writes `dose_gy` as an RT Dose (DoseUnits GY, TissueHeterogeneityCorrection
/// IMAGE, relative GridFrameOffsetVector, DoseGridScaling = max / (2^bits − 1)),
/// new Series/SOP Instance UIDs from dcmGenerateUniqueIdentifier, written
/// atomically (core/atomic_file.h).
/// Throws InputError (no plan, FrameOfReference of plan and CT differ, beam
/// number missing for BEAM summation or not in the plan, rbe missing for
/// EFFECTIVE, negative or non-finite dose naming the voxel, invalid grid),
/// IoError (write failure).
void write_rt_dose(const std::string& path, const Volume<float>& dose_gy,
                   const RtDoseWriteOptions& options);

}  // namespace protondose::dicom
