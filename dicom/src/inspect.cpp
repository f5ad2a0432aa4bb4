// `protondose inspect`: summaries of CT series, RT Ion Plans, RT Doses and
// RT Structure Sets (keys: docs/formats/inspect-json.md).
#include "protondose/dicom/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dcmtk_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"

namespace protondose::dicom {

using nlohmann::json;

namespace {

json vec(const Vec3& v) { return json::array({v[0], v[1], v[2]}); }

json grid_json(const Grid3& g) {
  return {{"size", {g.size[0], g.size[1], g.size[2]}},
          {"spacing_mm", vec(g.spacing_mm)},
          {"origin_mm", vec(g.origin_mm)},
          {"axes", json::array({vec(g.axis[0]), vec(g.axis[1]), vec(g.axis[2])})},
          {"axis_aligned_identity", g.axis_aligned()}};
}

json error_json(const Error& e) { return {{"category", category_name(e.category())}, {"message", e.what()}}; }

json inspect_ct(const std::string& folder, const std::string& series_uid, std::size_t files) {
  json out{{"kind", "ct_series"}, {"folder", folder}, {"series_instance_uid", series_uid}, {"files", files}};
  try {
    const CtSeriesReadResult result = read_ct_series_detailed(folder, series_uid);
    const CtImage& ct = result.ct;
    out["padding_hu"] = result.padding_hu ? nlohmann::json(*result.padding_hu) : nlohmann::json();
    out["padding_voxels"] = result.padding_voxels;
    out["grid"] = grid_json(ct.hu.grid);
    out["patient_position"] = ct.patient_position;
    out["study_instance_uid"] = ct.study_instance_uid;
    out["frame_of_reference_uid"] = ct.frame_of_reference_uid;
    out["patient_id"] = ct.patient_id;
    out["patient_name"] = ct.patient_name;
    const auto [lo, hi] = std::minmax_element(ct.hu.data.begin(), ct.hu.data.end());
    out["hu_min"] = *lo;
    out["hu_max"] = *hi;
  } catch (const Error& e) {
    out["error"] = error_json(e);
  }
  return out;
}

const char* unit_name(MetersetUnit unit) { return unit == MetersetUnit::kMonitorUnits ? "MU" : "NP"; }

json inspect_plan(const std::string& path) {
  json out{{"kind", "ion_plan"}, {"file", path}};
  try {
    // Read with every relaxation so that a plan with an aperture or a
    // shifter without settings is still shown; each relaxation used is a
    // warning, and such a plan is marked not computable.
    IonPlanReadOptions options;
    options.drop_apertures = true;
    options.allow_range_shifter_without_settings = true;
    const IonPlanReadResult result = read_ion_plan_detailed(path, options);
    const IonPlan& plan = result.plan;
    out["label"] = plan.label;
    out["sop_instance_uid"] = plan.sop_instance_uid;
    out["study_instance_uid"] = plan.study_instance_uid;
    out["frame_of_reference_uid"] = plan.frame_of_reference_uid;
    out["patient_id"] = plan.patient_id;
    out["patient_name"] = plan.patient_name;
    out["rt_plan_geometry"] = result.rt_plan_geometry;
    out["fractions"] = plan.number_of_fractions;
    out["computable"] = result.warnings.empty();
    out["warnings"] = result.warnings;
    std::map<std::string, double> totals;
    std::set<std::string> machines;
    json beams = json::array();
    for (std::size_t b = 0; b < plan.beams.size(); ++b) {
      const IonBeam& beam = plan.beams[b];
      const IonBeamDetails& details = result.beams[b];
      double e_min = 1e300, e_max = -1e300;
      for (const auto& layer : beam.layers) {
        e_min = std::min(e_min, layer.nominal_energy_mev);
        e_max = std::max(e_max, layer.nominal_energy_mev);
      }
      json shifters = json::array();
      for (const auto& rs : beam.range_shifters)
        shifters.push_back({{"id", rs.id},
                            {"water_equivalent_thickness_mm", rs.water_equivalent_thickness_mm},
                            {"isocenter_to_shifter_mm", rs.isocenter_to_shifter_mm ? json(*rs.isocenter_to_shifter_mm) : json()}});
      const double meterset = beam.total_meterset();
      totals[unit_name(beam.meterset_unit)] += meterset;
      machines.insert(beam.machine_name);
      beams.push_back({{"number", beam.number},
                       {"name", beam.name},
                       {"machine", beam.machine_name},
                       {"patient_position", details.patient_position},
                       {"treatment_delivery_type", details.treatment_delivery_type},
                       {"gantry_angle_deg", beam.gantry_angle_deg},
                       {"couch_angle_deg", beam.couch_angle_deg},
                       {"isocenter_mm", vec(beam.isocenter_mm)},
                       {"vsad_mm", beam.vsad_x_mm ? json::array({*beam.vsad_x_mm, *beam.vsad_y_mm}) : json()},
                       {"snout_position_mm", beam.snout_position_mm ? json(*beam.snout_position_mm) : json()},
                       {"range_shifters", shifters},
                       {"range_shifters_not_inserted", details.range_shifters_not_inserted},
                       {"aperture_ignored", details.aperture_dropped},
                       {"meterset_unit", unit_name(beam.meterset_unit)},
                       {"beam_meterset", beam.beam_meterset},
                       {"meterset_per_fraction", meterset},
                       {"control_points", details.number_of_control_points},
                       {"layers", beam.layers.size()},
                       {"spots", beam.spot_count()},
                       {"energy_min_mev", e_min},
                       {"energy_max_mev", e_max}});
    }
    out["machines"] = machines;
    out["beams"] = beams;
    out["spots"] = plan.spot_count();
    out["meterset_per_fraction"] = totals;
  } catch (const Error& e) {
    out["error"] = error_json(e);
  }
  return out;
}

json inspect_dose(const std::string& path) {
  json out{{"kind", "rt_dose"}, {"file", path}};
  try {
    const RtDose dose = read_rt_dose(path);
    out["grid"] = grid_json(dose.dose_gy.grid);
    out["units"] = dose.units;
    out["type"] = dose.type;
    out["summation_type"] = dose.summation_type;
    out["referenced_plan_uid"] = dose.referenced_plan_uid;
    out["frame_of_reference_uid"] = dose.frame_of_reference_uid;
    out["study_instance_uid"] = dose.study_instance_uid;
    out["dose_grid_scaling"] = dose.dose_grid_scaling;
    out["max"] = dose.dose_gy.data.empty() ? 0.0 : *std::max_element(dose.dose_gy.data.begin(), dose.dose_gy.data.end());
  } catch (const Error& e) {
    out["error"] = error_json(e);
  }
  return out;
}

json inspect_struct(const std::string& path) {
  json out{{"kind", "rt_struct"}, {"file", path}};
  try {
    const StructureSet set = read_rt_structure_set(path);
    out["label"] = set.label;
    out["sop_instance_uid"] = set.sop_instance_uid;
    out["frame_of_reference_uid"] = set.frame_of_reference_uid;
    json rois = json::array();
    for (const auto& roi : set.rois)
      rois.push_back({{"number", roi.number},
                      {"name", roi.name},
                      {"interpreted_type", roi.interpreted_type},
                      {"contours", roi.contours.size()}});
    out["rois"] = rois;
  } catch (const Error& e) {
    out["error"] = error_json(e);
  }
  return out;
}

}  // namespace

json inspect_path(const std::string& file_or_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(file_or_dir, ec)) throw IoError("cannot inspect '" + file_or_dir + "': no such file or folder");
  std::vector<std::string> files;
  if (std::filesystem::is_directory(file_or_dir, ec)) {
    for (std::filesystem::recursive_directory_iterator it(file_or_dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file()) files.push_back(it->path().string());
    if (ec) throw IoError("cannot list '" + file_or_dir + "': " + ec.message());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(file_or_dir);
  }

  json objects = json::array();
  // CT slices are grouped by (folder, SeriesInstanceUID) and read as series.
  std::map<std::pair<std::string, std::string>, std::size_t> ct_series;
  std::size_t skipped = 0;
  for (const auto& path : files) {
    if (!detail::looks_like_dicom(path)) {
      ++skipped;
      continue;
    }
    std::string sop_class;
    std::string series_uid;
    try {
      auto file = detail::load_file(path, /*load_all=*/false);
      sop_class = detail::sop_class_of(*file);
      OFString uid;
      if (file->getDataset()->findAndGetOFString(DCM_SeriesInstanceUID, uid).good()) series_uid = uid.c_str();
    } catch (const Error& e) {
      objects.push_back({{"kind", "unreadable"}, {"file", path}, {"error", error_json(e)}});
      continue;
    }
    if (sop_class == UID_CTImageStorage) {
      ++ct_series[{std::filesystem::path(path).parent_path().string(), series_uid}];
    } else if (sop_class == UID_RTIonPlanStorage) {
      objects.push_back(inspect_plan(path));
    } else if (sop_class == UID_RTDoseStorage) {
      objects.push_back(inspect_dose(path));
    } else if (sop_class == UID_RTStructureSetStorage) {
      objects.push_back(inspect_struct(path));
    } else {
      const char* name = dcmFindNameOfUID(sop_class.c_str());
      objects.push_back({{"kind", "unsupported"}, {"file", path}, {"sop_class_uid", sop_class},
                         {"sop_class", name ? name : ""}});
    }
  }
  json ct_objects = json::array();
  for (const auto& [key, count] : ct_series) ct_objects.push_back(inspect_ct(key.first, key.second, count));
  for (auto& o : objects) ct_objects.push_back(std::move(o));
  if (ct_objects.empty())
    throw InputError("'" + file_or_dir + "' holds no DICOM objects (" + std::to_string(skipped) +
                     " non-DICOM file(s) skipped)");
  return {{"path", file_or_dir}, {"objects", ct_objects}, {"skipped_non_dicom_files", skipped}};
}

namespace {

std::string fmt(double v, int decimals = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

std::string triple(const json& a, int decimals = 2) {
  if (!a.is_array() || a.size() != 3) return "-";
  return "(" + fmt(a[0].get<double>(), decimals) + ", " + fmt(a[1].get<double>(), decimals) + ", " +
         fmt(a[2].get<double>(), decimals) + ")";
}

std::string size3(const json& a) {
  return std::to_string(a[0].get<int>()) + " x " + std::to_string(a[1].get<int>()) + " x " +
         std::to_string(a[2].get<int>());
}

std::string str(const json& o, const char* key) {
  if (!o.contains(key) || o[key].is_null()) return "-";
  if (o[key].is_string()) return o[key].get<std::string>().empty() ? "-" : o[key].get<std::string>();
  return o[key].dump();
}

void grid_lines(std::ostringstream& s, const json& g) {
  s << "  size        " << size3(g["size"]) << " voxels\n"
    << "  spacing     " << triple(g["spacing_mm"], 3) << " mm\n"
    << "  origin      " << triple(g["origin_mm"], 3) << " mm (first voxel centre)\n";
  if (!g["axis_aligned_identity"].get<bool>())
    s << "  axes        i " << triple(g["axes"][0], 3) << "  j " << triple(g["axes"][1], 3) << "  k "
      << triple(g["axes"][2], 3) << "\n";
}

}  // namespace

std::string format_inspect_text(const json& summary) {
  std::ostringstream s;
  for (const auto& o : summary.at("objects")) {
    const std::string kind = o.at("kind");
    if (kind == "ct_series") {
      s << "CT series   " << str(o, "series_instance_uid") << "  (" << o["files"].get<std::size_t>() << " files in "
        << str(o, "folder") << ")\n";
      if (!o.contains("error")) {
        grid_lines(s, o["grid"]);
        s << "  patient     " << str(o, "patient_position") << "  id " << str(o, "patient_id") << "\n"
          << "  HU range    " << fmt(o["hu_min"].get<double>(), 0) << " … " << fmt(o["hu_max"].get<double>(), 0)
          << (o["padding_hu"].is_null() ? std::string()
                                        : "  (padding " + fmt(o["padding_hu"].get<double>(), 0) + " HU in " +
                                              std::to_string(o["padding_voxels"].get<std::size_t>()) + " voxels)")
          << "\n"
          << "  frame       " << str(o, "frame_of_reference_uid") << "\n";
      }
    } else if (kind == "ion_plan") {
      s << "RT Ion Plan " << str(o, "file") << "\n";
      if (!o.contains("error")) {
        s << "  label       " << str(o, "label") << "  patient " << str(o, "patient_id") << "\n"
          << "  fractions   " << o["fractions"].get<int>() << "\n"
          << "  frame       " << str(o, "frame_of_reference_uid") << "\n";
        for (const auto& [unit, total] : o["meterset_per_fraction"].items())
          s << "  total       " << fmt(total.get<double>(), unit == "MU" ? 2 : 0) << " " << unit << " per fraction\n";
        s << "  beam  name              machine           gantry  couch  isocentre (mm)              VSAD x/y (mm)   RS (WET mm)  layers  spots  E (MeV)          meterset/fx\n";
        for (const auto& b : o["beams"]) {
          std::string rs;
          for (const auto& r : b["range_shifters"])
            rs += (rs.empty() ? "" : ",") + r["id"].get<std::string>() + " (" +
                  fmt(r["water_equivalent_thickness_mm"].get<double>(), 1) + ")";
          const std::string vsad = b["vsad_mm"].is_null()
                                       ? "-"
                                       : fmt(b["vsad_mm"][0].get<double>(), 0) + "/" + fmt(b["vsad_mm"][1].get<double>(), 0);
          char line[512];
          std::snprintf(line, sizeof line, "  %-5d %-17s %-17s %6.1f %6.1f  %-27s %-15s %-12s %6zu %6zu  %6.2f-%-7.2f  %.2f %s\n",
                        b["number"].get<int>(), b["name"].get<std::string>().substr(0, 17).c_str(),
                        b["machine"].get<std::string>().substr(0, 17).c_str(), b["gantry_angle_deg"].get<double>(),
                        b["couch_angle_deg"].get<double>(), triple(b["isocenter_mm"]).c_str(), vsad.c_str(),
                        rs.empty() ? "-" : rs.c_str(), b["layers"].get<std::size_t>(), b["spots"].get<std::size_t>(),
                        b["energy_min_mev"].get<double>(), b["energy_max_mev"].get<double>(),
                        b["meterset_per_fraction"].get<double>(), b["meterset_unit"].get<std::string>().c_str());
          s << line;
        }
        for (const auto& w : o["warnings"]) s << "  WARNING     " << w.get<std::string>() << "\n";
      }
    } else if (kind == "rt_dose") {
      s << "RT Dose     " << str(o, "file") << "\n";
      if (!o.contains("error")) {
        grid_lines(s, o["grid"]);
        s << "  dose        " << str(o, "units") << " " << str(o, "type") << " " << str(o, "summation_type")
          << ", max " << fmt(o["max"].get<double>(), 4) << "\n"
          << "  plan        " << str(o, "referenced_plan_uid") << "\n"
          << "  frame       " << str(o, "frame_of_reference_uid") << "\n";
      }
    } else if (kind == "rt_struct") {
      s << "RT Struct   " << str(o, "file") << "\n";
      if (!o.contains("error")) {
        s << "  frame       " << str(o, "frame_of_reference_uid") << "\n";
        for (const auto& r : o["rois"])
          s << "  ROI " << r["number"].get<int>() << "       " << r["name"].get<std::string>() << " ("
            << (r["interpreted_type"].get<std::string>().empty() ? "-" : r["interpreted_type"].get<std::string>())
            << ", " << r["contours"].get<std::size_t>() << " contours)\n";
      }
    } else {
      s << (kind == "unsupported" ? "Other       " : "Unreadable  ") << str(o, "file");
      if (kind == "unsupported") s << "  (" << str(o, "sop_class") << " " << str(o, "sop_class_uid") << ")";
      s << "\n";
    }
    if (o.contains("error"))
      s << "  ERROR       [" << o["error"]["category"].get<std::string>() << "] " << o["error"]["message"].get<std::string>() << "\n";
    s << "\n";
  }
  return s.str();
}

}  // namespace protondose::dicom
