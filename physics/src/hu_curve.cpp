#include "protondose/physics/hu_curve.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/physics/materials.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {
namespace {

std::string row_name(const std::vector<int>& source_lines, std::size_t index) {
  if (index < source_lines.size()) return "line " + std::to_string(source_lines[index]);
  return "row " + std::to_string(index + 1);
}

std::string format_range(double lo, double hi) {
  std::ostringstream s;
  s << "[" << lo << ", " << hi << "] HU";
  return s.str();
}

std::string trim(const std::string& s) {
  std::size_t b = 0;
  std::size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(trim(field));
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

}  // namespace

HuCurve::HuCurve(std::vector<HuCurvePoint> points, std::string source, std::vector<int> source_lines)
    : points_(std::move(points)), source_(std::move(source)) {
  if (points_.size() < 2) {
    throw DataError("HU curve " + source_ + ": " + std::to_string(points_.size()) +
                    " calibration row(s); at least 2 are needed");
  }
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const HuCurvePoint& p = points_[i];
    const std::string where = "HU curve " + source_ + ", " + row_name(source_lines, i) + ": ";
    std::ostringstream msg;
    if (!std::isfinite(p.hu) || !std::isfinite(p.rsp) || !std::isfinite(p.mass_density_g_cm3)) {
      msg << where << "non-finite value (HU " << p.hu << ", rsp " << p.rsp << ", mass density "
          << p.mass_density_g_cm3 << " g/cm3)";
      throw DataError(msg.str());
    }
    if (!(p.rsp > 0.0)) {
      msg << where << "rsp " << p.rsp << " at HU " << p.hu << " must be > 0";
      throw DataError(msg.str());
    }
    if (!(p.mass_density_g_cm3 > 0.0)) {
      msg << where << "mass density " << p.mass_density_g_cm3 << " g/cm3 at HU " << p.hu
          << " must be > 0";
      throw DataError(msg.str());
    }
    if (i > 0 && p.hu < points_[i - 1].hu) {
      msg << where << "HU " << p.hu << " is below the previous row's " << points_[i - 1].hu
          << " HU; HU must be non-decreasing";
      throw DataError(msg.str());
    }
    if (i > 1 && p.hu == points_[i - 1].hu && p.hu == points_[i - 2].hu) {
      msg << where << "HU " << p.hu << " appears in three rows; a step uses exactly two";
      throw DataError(msg.str());
    }
  }
  if (!(hu_max() > hu_min())) {
    throw DataError("HU curve " + source_ + ": all rows are at HU " + std::to_string(hu_min()) +
                    "; the curve must span a range of HU");
  }
  table_hu_first_ = static_cast<int>(std::ceil(hu_min()));
  const int last = static_cast<int>(std::floor(hu_max()));
  const std::size_t n = static_cast<std::size_t>(last - table_hu_first_ + 1);
  rsp_table_.resize(n);
  density_table_.resize(n);
  x0_table_.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double hu = table_hu_first_ + static_cast<double>(k);
    const double density = interpolate(hu, false);
    rsp_table_[k] = static_cast<float>(interpolate(hu, true));
    density_table_[k] = static_cast<float>(density);
    x0_table_[k] = static_cast<float>(physics::radiation_length_g_cm2(density));
  }
}

double HuCurve::interpolate(double hu, bool want_rsp) const {
  // First row strictly above hu; the row before it is at or below hu, so at a
  // step (two rows at one HU) the later row wins: right-continuous.
  const auto upper = std::upper_bound(points_.begin(), points_.end(), hu,
                                      [](double h, const HuCurvePoint& p) { return h < p.hu; });
  if (upper == points_.end()) {
    return want_rsp ? points_.back().rsp : points_.back().mass_density_g_cm3;
  }
  const HuCurvePoint& hi = *upper;
  const HuCurvePoint& lo = *(upper - 1);
  const double f = (hu - lo.hu) / (hi.hu - lo.hu);
  return want_rsp ? lo.rsp + f * (hi.rsp - lo.rsp)
                  : lo.mass_density_g_cm3 + f * (hi.mass_density_g_cm3 - lo.mass_density_g_cm3);
}

void HuCurve::check_covered(double hu, const char* what) const {
  if (!(hu >= hu_min() && hu <= hu_max())) {
    std::ostringstream msg;
    msg << what << ": HU " << hu << " is outside the calibration " << source_ << " which covers "
        << format_range(hu_min(), hu_max());
    throw InputError(msg.str());
  }
}

double HuCurve::rsp(double hu) const {
  check_covered(hu, "relative stopping power");
  return interpolate(hu, true);
}

double HuCurve::mass_density_g_cm3(double hu) const {
  check_covered(hu, "mass density");
  return interpolate(hu, false);
}

double HuCurve::radiation_length_g_cm2(double hu) const {
  check_covered(hu, "radiation length");
  return physics::radiation_length_g_cm2(interpolate(hu, false));
}

template <typename T>
HuConversionReport HuCurve::convert_impl(const T* hu, std::size_t count, HuCoveragePolicy policy,
                                         float* rsp_out, float* density_g_cm3_out) const {
  HuConversionReport report;
  report.voxel_count = count;
  report.ct_hu_min = std::numeric_limits<double>::infinity();
  report.ct_hu_max = -std::numeric_limits<double>::infinity();
  const int first = table_hu_first();
  const int last = table_hu_last();
  std::size_t first_bad_index = count;
  double first_bad_hu = 0.0;
  for (std::size_t v = 0; v < count; ++v) {
    const double value = static_cast<double>(hu[v]);
    if (!std::isfinite(value)) {
      std::ostringstream msg;
      msg << "CT conversion: voxel " << v << " has a non-finite CT number (" << value << ")";
      throw InputError(msg.str());
    }
    report.ct_hu_min = std::min(report.ct_hu_min, value);
    report.ct_hu_max = std::max(report.ct_hu_max, value);
    long rounded = std::lround(value);
    if (rounded < first || rounded > last) {
      if (rounded < first) {
        ++report.clamped_below_count;
      } else {
        ++report.clamped_above_count;
      }
      if (first_bad_index == count) {
        first_bad_index = v;
        first_bad_hu = value;
      }
      rounded = std::clamp(rounded, static_cast<long>(first), static_cast<long>(last));
    }
    const int h = static_cast<int>(rounded);
    if (rsp_out != nullptr) rsp_out[v] = rsp_at(h);
    if (density_g_cm3_out != nullptr) density_g_cm3_out[v] = mass_density_g_cm3_at(h);
  }
  const std::size_t outside = report.clamped_below_count + report.clamped_above_count;
  if (outside > 0) {
    std::ostringstream msg;
    if (policy == HuCoveragePolicy::kError) {
      msg << "CT conversion: HU " << first_bad_hu << " at voxel " << first_bad_index
          << " is outside the calibration " << source_ << " which covers "
          << format_range(hu_min(), hu_max()) << " (" << outside << " of " << count
          << " voxels outside, CT range " << format_range(report.ct_hu_min, report.ct_hu_max)
          << "); extend the curve or choose the clamp-to-ends policy";
      throw InputError(msg.str());
    }
    msg << "CT conversion (policy " << hu_coverage_policy_name(policy) << "): "
        << report.clamped_below_count << " voxels below " << hu_min() << " HU and "
        << report.clamped_above_count << " voxels above " << hu_max()
        << " HU were given the end rows' values of " << source_ << " (CT range "
        << format_range(report.ct_hu_min, report.ct_hu_max) << ")";
    report.clamp_summary = msg.str();
  }
  if (count == 0) {
    report.ct_hu_min = 0.0;
    report.ct_hu_max = 0.0;
  }
  return report;
}

HuConversionReport HuCurve::convert(const float* hu, std::size_t count, HuCoveragePolicy policy,
                                    float* rsp_out, float* density_g_cm3_out) const {
  return convert_impl(hu, count, policy, rsp_out, density_g_cm3_out);
}

HuConversionReport HuCurve::convert(const std::int16_t* hu, std::size_t count, HuCoveragePolicy policy,
                                    float* rsp_out, float* density_g_cm3_out) const {
  return convert_impl(hu, count, policy, rsp_out, density_g_cm3_out);
}

HuCurve load_hu_curve_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("HU curve: cannot open '" + path + "'");
  std::string line;
  int line_number = 0;
  std::vector<std::string> header;
  int col_hu = -1;
  int col_rsp = -1;
  int col_density = -1;
  std::vector<HuCurvePoint> points;
  std::vector<int> lines;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    std::vector<std::string> fields = split_csv_line(t);
    if (header.empty()) {
      header = fields;
      for (std::size_t c = 0; c < header.size(); ++c) {
        const std::string name = lower(header[c]);
        int* target = name == "hu" ? &col_hu
                      : name == "rsp" ? &col_rsp
                      : name == "mass_density_g_cm3" ? &col_density
                                                     : nullptr;
        if (target == nullptr) continue;
        if (*target >= 0) {
          throw DataError("HU curve " + path + ", line " + std::to_string(line_number) +
                          ": column '" + header[c] + "' appears twice in the header");
        }
        *target = static_cast<int>(c);
      }
      for (const auto& [col, name] : {std::pair<int, const char*>{col_hu, "HU"},
                                      {col_rsp, "rsp"},
                                      {col_density, "mass_density_g_cm3"}}) {
        if (col < 0) {
          throw DataError("HU curve " + path + ", line " + std::to_string(line_number) +
                          ": the header has no column '" + name +
                          "' (needs HU, rsp and mass_density_g_cm3; found '" + t + "')");
        }
      }
      continue;
    }
    double values[3] = {0.0, 0.0, 0.0};
    const int cols[3] = {col_hu, col_rsp, col_density};
    for (int k = 0; k < 3; ++k) {
      const std::string name = header[static_cast<std::size_t>(cols[k])];
      if (static_cast<std::size_t>(cols[k]) >= fields.size()) {
        throw DataError("HU curve " + path + ", line " + std::to_string(line_number) + ": only " +
                        std::to_string(fields.size()) + " fields; column '" + name + "' is missing");
      }
      const std::string& text = fields[static_cast<std::size_t>(cols[k])];
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
        throw DataError("HU curve " + path + ", line " + std::to_string(line_number) + ": column '" +
                        name + "' value '" + text + "' is not a number");
      }
      values[k] = v;
    }
    points.push_back({values[0], values[1], values[2]});
    lines.push_back(line_number);
  }
  if (header.empty()) throw DataError("HU curve " + path + ": no header row (file is empty or all comments)");
  return HuCurve(std::move(points), path, std::move(lines));
}

HuCurve default_hu_curve() {
  return load_hu_curve_csv((shipped_data_dir() / "hu-curves" / kDefaultHuCurveFile).string());
}

HuCurve monte_carlo_reference_hu_curve() {
  return load_hu_curve_csv((shipped_data_dir() / "hu-curves" / kMonteCarloReferenceHuCurveFile).string());
}

const char* hu_coverage_policy_name(HuCoveragePolicy policy) noexcept {
  switch (policy) {
    case HuCoveragePolicy::kError: return "error";
    case HuCoveragePolicy::kClampToEnds: return "clamp-to-ends";
  }
  return "unknown";
}

}  // namespace protondose::physics
