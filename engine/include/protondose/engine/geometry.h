#pragma once
/// \file geometry.h
/// Treatment-room geometry: IEC 61217 gantry and patient-support rotations, the
/// patient's position on the table (HFS, FFS, HFP, FFP) and the isocentre, as
/// one rigid map between the DICOM patient frame and the beam frame.
///
/// Frames (all mm, right-handed unless stated):
///  - patient: DICOM patient coordinates (+x patient left, +y posterior,
///    +z superior), in which the CT and IsocenterPosition are given.
///  - table (IEC "patient support", s): table-top axes with the origin at the
///    isocentre. At patient-support angle 0 it coincides with the fixed frame.
///  - fixed (IEC f): X_f to the right of an observer at the foot of the couch
///    facing the gantry, Y_f towards the gantry, Z_f up.
///  - gantry (IEC g): the fixed frame rotated by the gantry angle about Y_f; the
///    source lies on +Z_g and the beam travels along −Z_g.
///  - beam: (x, y, depth) = (X_g, Y_g, −Z_g): x and y are IEC gantry X and Y,
///    depth is measured from the isocentre along the beam direction (positive
///    downstream, the source at depth −SAD). This triple is left-handed; it is
///    a labelling of the gantry frame, not a new rotation.
///
/// For HFS, gantry 0, couch 0 the beam travels along patient +y (anterior to
/// posterior), x = patient x and y = patient z. At gantry 90 (HFS) the beam
/// comes from the patient's left and travels along patient −x.

#include <array>
#include <string>

#include "protondose/core/grid.h"

namespace protondose::engine {

/// DICOM PatientPosition values the engine supports.
enum class PatientPosition { kHfs, kFfs, kHfp, kFfp };

/// Parses a DICOM PatientPosition (HFS, FFS, HFP, FFP). Throws UnavailableError
/// naming the value for decubitus or other positions, InputError for an empty string.
PatientPosition parse_patient_position(const std::string& dicom_value);

/// Stable DICOM spelling ("HFS", ...).
const char* patient_position_name(PatientPosition position);

/// 3×3 rotation matrix, row-major: out[r] = Σ_c m[r][c]·in[c].
using Mat3 = std::array<std::array<double, 3>, 3>;

/// A rigid map between the DICOM patient frame and the beam frame of one beam.
class BeamFrame {
 public:
  /// gantry_angle_deg, couch_angle_deg: IEC 61217 angles (degrees, any value,
  /// reduced modulo 360). isocenter_patient_mm: IsocenterPosition. Throws
  /// InputError if an angle or the isocentre is not finite.
  BeamFrame(double gantry_angle_deg, double couch_angle_deg, const Vec3& isocenter_patient_mm,
            PatientPosition position);

  /// Beam coordinates (x_mm, y_mm, depth_mm) of a patient-frame point.
  Vec3 beam_from_patient(const Vec3& point_patient_mm) const;
  /// Patient-frame point of beam coordinates (x_mm, y_mm, depth_mm).
  Vec3 patient_from_beam(const Vec3& point_beam_mm) const;
  /// Patient-frame unit vector of the beam direction (increasing depth).
  Vec3 direction_patient() const { return col(2); }
  /// Patient-frame unit vectors of IEC gantry X and Y.
  Vec3 x_axis_patient() const { return col(0); }
  Vec3 y_axis_patient() const { return col(1); }
  const Vec3& isocenter_patient_mm() const { return iso_patient_mm_; }

 private:
  Vec3 col(int c) const { return {patient_from_beam_[0][c], patient_from_beam_[1][c], patient_from_beam_[2][c]}; }
  Vec3 iso_patient_mm_;
  Mat3 patient_from_beam_;  ///< columns: beam x, y, depth axes in the patient frame
};

}  // namespace protondose::engine
