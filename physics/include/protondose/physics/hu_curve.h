#pragma once
/// \file hu_curve.h
/// CT calibration: Hounsfield units → relative (to water) stopping power and
/// mass density, piecewise linear between the rows of a calibration table;
/// density → radiation length through materials.h. File format:
/// docs/formats/hu-curve-csv.md; model: docs/physics/ct-conversion.md.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace protondose::physics {

/// One row of a calibration table.
struct HuCurvePoint {
  double hu;                  ///< CT number, HU
  double rsp;                 ///< stopping power relative to water (dimensionless)
  double mass_density_g_cm3;  ///< mass density, g/cm³
};

/// What to do with CT numbers outside the calibrated range.
enum class HuCoveragePolicy {
  kError,        ///< the default: an HU outside [hu_min, hu_max] is an InputError
  kClampToEnds,  ///< use the first/last row's values; the caller logs the count once
};

/// Outcome of converting a CT volume (see HuCurve::convert).
struct HuConversionReport {
  std::size_t voxel_count = 0;         ///< voxels converted
  std::size_t clamped_below_count = 0; ///< voxels with HU < hu_min (only under kClampToEnds)
  std::size_t clamped_above_count = 0; ///< voxels with HU > hu_max (only under kClampToEnds)
  double ct_hu_min = 0.0;              ///< lowest HU found in the input
  double ct_hu_max = 0.0;              ///< highest HU found in the input
  /// One line for the log when anything was clamped ("" otherwise), naming the
  /// counts, the CT's HU range and the curve's range.
  std::string clamp_summary;
};

/// A validated, piecewise-linear HU calibration with a dense per-integer-HU
/// lookup table built at construction for fast voxel conversion.
/// Where two rows share an HU (a step), the value at exactly that HU is the
/// later row's (right-continuous).
class HuCurve {
 public:
  /// Validates and builds the lookup tables.
  /// \param source where the points came from (file path or name), used in messages.
  /// \param source_lines optional line number in the source file of each point,
  ///        used in messages instead of the 1-based row index.
  /// \throws DataError (naming source, row or line, and value) for fewer than 2
  ///         rows, a non-finite value, decreasing HU, rsp or density ≤ 0, or
  ///         more than two rows at one HU.
  HuCurve(std::vector<HuCurvePoint> points, std::string source, std::vector<int> source_lines = {});

  const std::string& source() const noexcept { return source_; }
  const std::vector<HuCurvePoint>& points() const noexcept { return points_; }
  double hu_min() const noexcept { return points_.front().hu; }
  double hu_max() const noexcept { return points_.back().hu; }

  /// Relative stopping power at hu (piecewise linear).
  /// \throws InputError when hu is outside [hu_min, hu_max] (names hu and the range).
  double rsp(double hu) const;
  /// Mass density at hu, g/cm³. \throws InputError as rsp().
  double mass_density_g_cm3(double hu) const;
  /// Radiation length at hu, g/cm²: radiation_length_g_cm2(mass_density_g_cm3(hu)).
  /// \throws InputError as rsp().
  double radiation_length_g_cm2(double hu) const;

  /// First and last integer HU of the dense tables: ceil(hu_min), floor(hu_max).
  int table_hu_first() const noexcept { return table_hu_first_; }
  int table_hu_last() const noexcept { return table_hu_first_ + static_cast<int>(rsp_table_.size()) - 1; }
  /// Fast lookups for integer HU; precondition table_hu_first() ≤ hu ≤ table_hu_last().
  float rsp_at(int hu) const noexcept { return rsp_table_[static_cast<std::size_t>(hu - table_hu_first_)]; }
  float mass_density_g_cm3_at(int hu) const noexcept { return density_table_[static_cast<std::size_t>(hu - table_hu_first_)]; }
  float radiation_length_g_cm2_at(int hu) const noexcept { return x0_table_[static_cast<std::size_t>(hu - table_hu_first_)]; }

  /// Converts count CT numbers (rounded to the nearest integer HU) to RSP and
  /// mass density through the dense tables. Either output may be null.
  /// \throws InputError under kError if any HU lies outside the curve, naming
  ///         the first offending voxel index, its HU, how many voxels are
  ///         outside, and the curve's range. Under kClampToEnds, out-of-range
  ///         voxels get the end rows' values and are counted in the report.
  HuConversionReport convert(const float* hu, std::size_t count, HuCoveragePolicy policy,
                             float* rsp_out, float* density_g_cm3_out) const;
  /// The same for int16 CT numbers (already rescaled to HU).
  HuConversionReport convert(const std::int16_t* hu, std::size_t count, HuCoveragePolicy policy,
                             float* rsp_out, float* density_g_cm3_out) const;

 private:
  template <typename T>
  HuConversionReport convert_impl(const T* hu, std::size_t count, HuCoveragePolicy policy,
                                  float* rsp_out, float* density_g_cm3_out) const;
  double interpolate(double hu, bool want_rsp) const;
  void check_covered(double hu, const char* what) const;

  std::vector<HuCurvePoint> points_;
  std::string source_;
  int table_hu_first_ = 0;
  std::vector<float> rsp_table_;
  std::vector<float> density_table_;
  std::vector<float> x0_table_;
};

/// Reads a calibration CSV (docs/formats/hu-curve-csv.md): '#' lines are
/// comments, the first other line is the header; columns HU, rsp and
/// mass_density_g_cm3 (case-insensitive, any order; others ignored).
/// \throws IoError when the file cannot be opened; DataError (naming the file,
///         the line and the value) for a missing column, a malformed number or
///         any HuCurve validation failure.
HuCurve load_hu_curve_csv(const std::string& path);

/// Name of the shipped default curve file under data/hu-curves/: a
/// stoichiometric-style curve (Schneider, Pedroni & Lomax, PMB 41:111, 1996;
/// tissues and densities of Schneider, Bortfeld & Schlegel, PMB 45:459, 2000).
inline constexpr const char* kDefaultHuCurveFile = "schneider2000_stoichiometric.csv";

/// Name of the shipped curve of the project's Monte Carlo references (MCsquare's
/// 4-material calibration of shared/reference/{water,slab}_dcpt): comparisons
/// with those references must use this one, not the default.
inline constexpr const char* kMonteCarloReferenceHuCurveFile = "dcpt_mcsquare_4tissue.csv";

/// The shipped default curve, read from shipped_data_dir()/hu-curves/ (range_energy.h)
/// (see data/hu-curves/README.md for its source and why it is the default).
/// \throws IoError / DataError as load_hu_curve_csv.
HuCurve default_hu_curve();

/// The shipped curve named kMonteCarloReferenceHuCurveFile.
/// \throws IoError / DataError as load_hu_curve_csv.
HuCurve monte_carlo_reference_hu_curve();

/// Short stable name of a policy ("error", "clamp-to-ends").
const char* hu_coverage_policy_name(HuCoveragePolicy policy) noexcept;

}  // namespace protondose::physics
