#include "protondose/compare/report.h"

namespace protondose::compare {

nlohmann::json to_json(const GammaOptions& options, const GammaResult& r) {
  return {
      {"dose_criterion_percent", options.dose_criterion_percent},
      {"distance_mm", options.distance_mm},
      {"local", options.local},
      {"threshold_percent", options.threshold_percent},
      {"normalisation_dose_gy", r.normalisation_dose_gy},
      {"threshold_dose_gy", r.threshold_dose_gy},
      {"max_search_mm", r.max_search_mm},
      {"resolution_mm", r.resolution_mm},
      {"pass_rate_percent", r.pass_rate_percent},
      {"mean_gamma", r.mean_gamma},
      {"p95_gamma", r.p95_gamma},
      {"max_gamma", r.max_gamma},
      {"evaluated_voxels", r.evaluated_voxels},
      {"passed_voxels", r.passed_voxels},
      {"search_limited_voxels", r.search_limited_voxels},
      {"reference_voxels_outside_test_grid", r.reference_voxels_outside_evaluated},
  };
}

nlohmann::json to_json(const DoseDifferenceResult& r) {
  return {
      {"voxels", r.voxels},
      {"normalisation_dose_gy", r.normalisation_dose_gy},
      {"threshold_dose_gy", r.threshold_dose_gy},
      {"mean_gy", r.mean_gy},
      {"rms_gy", r.rms_gy},
      {"max_gy", r.max_gy},
      {"min_gy", r.min_gy},
      {"max_abs_gy", r.max_abs_gy},
      {"mean_percent", r.mean_percent},
      {"rms_percent", r.rms_percent},
      {"max_percent", r.max_percent},
      {"min_percent", r.min_percent},
      {"max_abs_percent", r.max_abs_percent},
  };
}

nlohmann::json to_json(const Dvh& d, bool with_curve) {
  nlohmann::json j{
      {"roi", d.roi_name},         {"voxels", d.voxels},
      {"volume_cc", d.volume_cc},  {"mean_gy", d.mean_gy},
      {"min_gy", d.min_gy},        {"max_gy", d.max_gy},
      {"d2_gy", d.d2_gy},          {"d50_gy", d.d50_gy},
      {"d95_gy", d.d95_gy},        {"d98_gy", d.d98_gy},
      {"prescription_gy", d.prescription_gy},
      {"v95_percent", d.v95_percent},
  };
  if (with_curve) {
    nlohmann::json dose = nlohmann::json::array(), volume = nlohmann::json::array();
    for (const DvhPoint& p : d.cumulative) {
      dose.push_back(p.dose_gy);
      volume.push_back(p.volume_percent);
    }
    j["cumulative"] = {{"dose_gy", dose}, {"volume_percent", volume}};
  }
  return j;
}

nlohmann::json to_json(const DistalFalloff& f) {
  return {{"max_dose_gy", f.max_dose_gy},
          {"max_position_mm", f.max_position_mm},
          {"r80_mm", f.r80_mm},
          {"r20_mm", f.r20_mm}};
}

nlohmann::json to_json(const Grid3& g) {
  return {{"size", g.size},
          {"spacing_mm", g.spacing_mm},
          {"origin_mm", g.origin_mm},
          {"axes", {g.axis[0], g.axis[1], g.axis[2]}}};
}

}  // namespace protondose::compare
