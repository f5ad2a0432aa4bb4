#include "protondose/engine/geometry.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::engine {
namespace {

constexpr double kPi = 3.14159265358979323846;

Mat3 multiply(const Mat3& a, const Mat3& b) {
  Mat3 m{};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      double s = 0.0;
      for (int k = 0; k < 3; ++k) s += a[r][k] * b[k][c];
      m[r][c] = s;
    }
  return m;
}

Mat3 transpose(const Mat3& a) {
  Mat3 m{};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) m[r][c] = a[c][r];
  return m;
}

/// Angle reduced to [0, 360) and converted to radians; exact zeros for the
/// cardinal angles keep the known-point tests free of 1e-16 residues.
void cos_sin_deg(double angle_deg, double& c, double& s) {
  double a = std::fmod(angle_deg, 360.0);
  if (a < 0) a += 360.0;
  if (a == 0.0) { c = 1; s = 0; return; }
  if (a == 90.0) { c = 0; s = 1; return; }
  if (a == 180.0) { c = -1; s = 0; return; }
  if (a == 270.0) { c = 0; s = -1; return; }
  c = std::cos(a * kPi / 180.0);
  s = std::sin(a * kPi / 180.0);
}

/// Table frame from the patient frame for a patient lying on the table in the
/// given position, head or feet towards the gantry (+Y_f). Rows: X_s, Y_s, Z_s
/// expressed in patient (x, y, z).
Mat3 table_from_patient(PatientPosition position) {
  switch (position) {
    // Supine, head to the gantry: left = +X, superior = +Y, posterior = −Z.
    case PatientPosition::kHfs: return Mat3{{{1, 0, 0}, {0, 0, 1}, {0, -1, 0}}};
    // Supine, feet to the gantry: left = −X, superior = −Y, posterior = −Z.
    case PatientPosition::kFfs: return Mat3{{{-1, 0, 0}, {0, 0, -1}, {0, -1, 0}}};
    // Prone, head to the gantry: left = −X, superior = +Y, posterior = +Z.
    case PatientPosition::kHfp: return Mat3{{{-1, 0, 0}, {0, 0, 1}, {0, 1, 0}}};
    // Prone, feet to the gantry: left = +X, superior = −Y, posterior = +Z.
    case PatientPosition::kFfp: return Mat3{{{1, 0, 0}, {0, 0, -1}, {0, 1, 0}}};
  }
  throw InternalError("table_from_patient: unknown PatientPosition");
}

}  // namespace

PatientPosition parse_patient_position(const std::string& v) {
  if (v.empty()) throw InputError("PatientPosition (0018,5100) is empty; expected HFS, FFS, HFP or FFP");
  if (v == "HFS") return PatientPosition::kHfs;
  if (v == "FFS") return PatientPosition::kFfs;
  if (v == "HFP") return PatientPosition::kHfp;
  if (v == "FFP") return PatientPosition::kFfp;
  throw UnavailableError("PatientPosition (0018,5100) '" + v +
                         "' is not supported; the engine handles HFS, FFS, HFP and FFP");
}

const char* patient_position_name(PatientPosition p) {
  switch (p) {
    case PatientPosition::kHfs: return "HFS";
    case PatientPosition::kFfs: return "FFS";
    case PatientPosition::kHfp: return "HFP";
    case PatientPosition::kFfp: return "FFP";
  }
  return "?";
}

BeamFrame::BeamFrame(double gantry_angle_deg, double couch_angle_deg, const Vec3& iso,
                     PatientPosition position)
    : iso_patient_mm_(iso) {
  if (!std::isfinite(gantry_angle_deg) || !std::isfinite(couch_angle_deg)) {
    std::ostringstream m;
    m << "beam geometry: gantry angle " << gantry_angle_deg << " deg and couch angle "
      << couch_angle_deg << " deg must be finite";
    throw InputError(m.str());
  }
  for (double c : iso)
    if (!std::isfinite(c)) throw InputError("beam geometry: IsocenterPosition has a non-finite component");

  double cg, sg, cc, sc;
  cos_sin_deg(gantry_angle_deg, cg, sg);
  cos_sin_deg(couch_angle_deg, cc, sc);
  // Gantry: right-handed rotation by φ about Y_f (IEC 61217: clockwise seen from
  // the isocentre looking at the gantry), so the source sits at (sin φ, 0, cos φ).
  // Columns are X_g, Y_g, Z_g in the fixed frame.
  const Mat3 fixed_from_gantry{{{cg, 0, sg}, {0, 1, 0}, {-sg, 0, cg}}};
  // Patient support: right-handed rotation by θ about Z_f (IEC 61217:
  // counter-clockwise seen from above). The table frame turns with it.
  const Mat3 fixed_from_table{{{cc, -sc, 0}, {sc, cc, 0}, {0, 0, 1}}};
  // Beam labels (x, y, depth) = (X_g, Y_g, −Z_g).
  const Mat3 gantry_from_beam{{{1, 0, 0}, {0, 1, 0}, {0, 0, -1}}};
  const Mat3 patient_from_table = transpose(table_from_patient(position));
  const Mat3 table_from_fixed = transpose(fixed_from_table);
  patient_from_beam_ =
      multiply(patient_from_table, multiply(table_from_fixed, multiply(fixed_from_gantry, gantry_from_beam)));
}

Vec3 BeamFrame::beam_from_patient(const Vec3& p) const {
  const Vec3 d{p[0] - iso_patient_mm_[0], p[1] - iso_patient_mm_[1], p[2] - iso_patient_mm_[2]};
  Vec3 out{};
  // The inverse of an orthonormal map is its transpose.
  for (int c = 0; c < 3; ++c)
    out[c] = patient_from_beam_[0][c] * d[0] + patient_from_beam_[1][c] * d[1] + patient_from_beam_[2][c] * d[2];
  return out;
}

Vec3 BeamFrame::patient_from_beam(const Vec3& b) const {
  Vec3 out = iso_patient_mm_;
  for (int r = 0; r < 3; ++r)
    out[r] += patient_from_beam_[r][0] * b[0] + patient_from_beam_[r][1] * b[1] + patient_from_beam_[r][2] * b[2];
  return out;
}

}  // namespace protondose::engine
