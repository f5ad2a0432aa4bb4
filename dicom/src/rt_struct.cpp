// RT Structure Set reading and ROI rasterisation (even–odd scanline fill of
// the closed planar contours at voxel centres).
#include "protondose/dicom/rt_struct.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "dcmtk_util.h"
#include "protondose/core/error.h"

namespace protondose::dicom {

using detail::find_integer;
using detail::find_numbers;
using detail::find_string;
using detail::require_integer;
using detail::sequence_items;
using detail::tag_label;
using detail::Where;

namespace {

// Points of one contour may deviate from its plane by this much (mm): DS
// coordinates carry a few decimals.
constexpr double kPlanarityToleranceMm = 0.01;

std::string describe(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string roi_names(const StructureSet& set) {
  std::string names;
  for (const auto& roi : set.rois) names += (names.empty() ? "'" : ", '") + roi.name + "'";
  return names.empty() ? "(none)" : names;
}

}  // namespace

const Roi& StructureSet::roi(const std::string& name) const {
  for (const auto& r : rois)
    if (r.name == name) return r;
  throw InputError("structure set '" + label + "' (" + sop_instance_uid + ") has no ROI named '" + name +
                   "'; ROIs: " + roi_names(*this));
}

StructureSet read_rt_structure_set(const std::string& path) {
  auto file = detail::load_file(path);
  const Where w{path, ""};
  const std::string sop_class = detail::sop_class_of(*file);
  if (sop_class != UID_RTStructureSetStorage)
    throw InputError(w.prefix() + "not an RT Structure Set (" + tag_label(DCM_SOPClassUID) + " is '" +
                     sop_class + "', expected " + UID_RTStructureSetStorage + ")");
  DcmDataset& ds = *file->getDataset();
  StructureSet set;
  set.sop_instance_uid = find_string(ds, DCM_SOPInstanceUID, w).value_or("");
  set.label = find_string(ds, DCM_StructureSetLabel, w).value_or("");
  const auto frames = sequence_items(ds, DCM_ReferencedFrameOfReferenceSequence);
  if (!frames.empty()) set.frame_of_reference_uid = find_string(*frames[0], DCM_FrameOfReferenceUID, w).value_or("");

  std::map<long, std::size_t> index_of_number;
  for (DcmItem* item : sequence_items(ds, DCM_StructureSetROISequence)) {
    const Where iw = w.with("StructureSetROISequence");
    Roi roi;
    roi.number = static_cast<int>(require_integer(*item, DCM_ROINumber, iw));
    roi.name = find_string(*item, DCM_ROIName, iw).value_or("");
    roi.frame_of_reference_uid = find_string(*item, DCM_ReferencedFrameOfReferenceUID, iw).value_or("");
    if (index_of_number.count(roi.number))
      throw InputError(iw.prefix() + tag_label(DCM_ROINumber) + " " + std::to_string(roi.number) + " appears twice");
    index_of_number[roi.number] = set.rois.size();
    set.rois.push_back(std::move(roi));
  }
  for (DcmItem* item : sequence_items(ds, DCM_RTROIObservationsSequence)) {
    const auto number = find_integer(*item, DCM_ReferencedROINumber, w.with("RTROIObservationsSequence"));
    if (!number || !index_of_number.count(*number)) continue;
    set.rois[index_of_number[*number]].interpreted_type =
        find_string(*item, DCM_RTROIInterpretedType, w).value_or("");
  }
  for (DcmItem* item : sequence_items(ds, DCM_ROIContourSequence)) {
    const long number = require_integer(*item, DCM_ReferencedROINumber, w.with("ROIContourSequence"));
    const auto it = index_of_number.find(number);
    if (it == index_of_number.end())
      throw InputError(w.prefix() + "ROIContourSequence " + tag_label(DCM_ReferencedROINumber) + " " +
                       std::to_string(number) + " is not in StructureSetROISequence");
    Roi& roi = set.rois[it->second];
    const auto contours = sequence_items(*item, DCM_ContourSequence);
    for (std::size_t c = 0; c < contours.size(); ++c) {
      const Where cw = w.with("ROI " + std::to_string(roi.number) + " '" + roi.name + "', contour " + std::to_string(c));
      const std::string type = find_string(*contours[c], DCM_ContourGeometricType, cw).value_or("");
      if (type != "CLOSED_PLANAR") continue;
      const auto data = find_numbers(*contours[c], DCM_ContourData, cw);
      if (const auto declared = find_integer(*contours[c], DCM_NumberOfContourPoints, cw);
          declared && static_cast<std::size_t>(*declared) * 3 != data.size())
        throw InputError(cw.prefix() + tag_label(DCM_ContourData) + ": " + std::to_string(data.size()) +
                         " values but " + tag_label(DCM_NumberOfContourPoints) + " is " + std::to_string(*declared) +
                         " (3 values per point)");
      if (data.size() % 3 != 0 || data.size() < 9)
        throw InputError(cw.prefix() + tag_label(DCM_ContourData) + ": " + std::to_string(data.size()) +
                         " values; a closed planar contour needs 3 per point and at least 3 points");
      Contour contour;
      for (std::size_t p = 0; p + 2 < data.size(); p += 3) contour.points_mm.push_back({data[p], data[p + 1], data[p + 2]});
      roi.contours.push_back(std::move(contour));
    }
  }
  return set;
}

Volume<std::uint8_t> rasterize_roi(const StructureSet& structures, const std::string& roi_name, const Grid3& grid) {
  const Roi& roi = structures.roi(roi_name);
  const std::string what = "ROI '" + roi_name + "'";
  grid.validate(what + " target grid");
  if (roi.contours.empty()) throw InputError(what + " has no closed planar contours");

  // Each contour in grid index coordinates (u = i, v = j) and its plane position w = k.
  struct Polygon {
    std::vector<std::pair<double, double>> uv;
    double w = 0.0;
  };
  std::vector<Polygon> polygons;
  for (std::size_t c = 0; c < roi.contours.size(); ++c) {
    Polygon poly;
    double w_min = 1e300, w_max = -1e300;
    for (const auto& point : roi.contours[c].points_mm) {
      const Vec3 ijk = grid.continuous_index(point);
      if (!std::isfinite(ijk[0]) || !std::isfinite(ijk[1]) || !std::isfinite(ijk[2]))
        throw InputError(what + ", contour " + std::to_string(c) + ": point (" + describe(point[0]) + ", " +
                         describe(point[1]) + ", " + describe(point[2]) + ") mm is too far from the grid to index");
      poly.uv.emplace_back(ijk[0], ijk[1]);
      w_min = std::min(w_min, ijk[2]);
      w_max = std::max(w_max, ijk[2]);
    }
    if ((w_max - w_min) * grid.spacing_mm[2] > kPlanarityToleranceMm)
      throw InputError(what + ", contour " + std::to_string(c) + ": not in a plane perpendicular to the grid's "
                       "slice axis (spread " + describe((w_max - w_min) * grid.spacing_mm[2]) + " mm along it)");
    poly.w = 0.5 * (w_min + w_max);
    polygons.push_back(std::move(poly));
  }

  // Distinct contour planes (in slice-index units) and their spacing.
  std::vector<double> planes;
  for (const auto& p : polygons) planes.push_back(p.w);
  std::sort(planes.begin(), planes.end());
  const double merge = kPlanarityToleranceMm / grid.spacing_mm[2];
  planes.erase(std::unique(planes.begin(), planes.end(), [&](double a, double b) { return b - a <= merge; }),
               planes.end());
  double plane_spacing = 1.0;  // slice-index units: the grid's spacing when there is one plane
  if (planes.size() > 1) {
    std::vector<double> gaps;
    for (std::size_t p = 1; p < planes.size(); ++p) gaps.push_back(planes[p] - planes[p - 1]);
    std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
    plane_spacing = gaps[gaps.size() / 2];
  }
  const double reach = 0.5 * plane_spacing + merge;

  Volume<std::uint8_t> mask(grid, 0);
  std::size_t inside = 0;
  std::vector<double> crossings;
  for (int k = 0; k < grid.size[2]; ++k) {
    // The nearest contour plane to this voxel slice, if within reach.
    const auto nearest = std::min_element(planes.begin(), planes.end(),
                                          [k](double a, double b) { return std::abs(a - k) < std::abs(b - k); });
    if (std::abs(*nearest - k) > reach) continue;
    const double plane = *nearest;
    for (int j = 0; j < grid.size[1]; ++j) {
      crossings.clear();
      const double v = j;
      for (const auto& poly : polygons) {
        if (std::abs(poly.w - plane) > merge) continue;
        const std::size_t n = poly.uv.size();
        for (std::size_t e = 0; e < n; ++e) {
          const auto [u1, v1] = poly.uv[e];
          const auto [u2, v2] = poly.uv[(e + 1) % n];
          // Half-open rule: a vertex on the scanline counts once.
          if ((v1 <= v && v < v2) || (v2 <= v && v < v1))
            crossings.push_back(u1 + (v - v1) * (u2 - u1) / (v2 - v1));
        }
      }
      std::sort(crossings.begin(), crossings.end());
      // Even–odd: centres between crossings 2m and 2m+1 are inside.
      for (std::size_t c = 0; c + 1 < crossings.size(); c += 2) {
        // Clamp in double before converting: a contour far outside the grid
        // must not overflow the int conversion.
        const int i_first = static_cast<int>(std::max(0.0, std::ceil(crossings[c])));
        const int i_last =
            static_cast<int>(std::min(static_cast<double>(grid.size[0]), std::ceil(crossings[c + 1]))) - 1;
        for (int i = i_first; i <= i_last; ++i) {
          mask.at(i, j, k) = 1;
          ++inside;
        }
      }
    }
  }
  if (inside == 0)
    throw InputError(what + ": no voxel centre of the " + std::to_string(grid.size[0]) + " × " +
                     std::to_string(grid.size[1]) + " × " + std::to_string(grid.size[2]) +
                     " grid lies inside its contours (does the ROI overlap the grid?)");
  return mask;
}

}  // namespace protondose::dicom
