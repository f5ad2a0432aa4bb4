// `protondose compare REF TEST [--gamma 3%/3mm] [--threshold 10%] [--local]
//   [--structures RTSTRUCT [--roi NAME]...] [--prescription GY] [--plan RTPLAN]
//   [--ct DIR] [--require PASS_RATE] [--json] [--png DIR]`
// Gamma, dose difference, depth-dose R80/R20 along the plan's beam axes and
// DVHs of a test dose against a reference dose (RT Dose or MetaImage .mhd).
// Keys of --json: docs/formats/compare-json.md; method: docs/compare.md.
// Exit status 1 when --require is given and the gamma pass rate is below it.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command_registry.h"
#include "protondose/compare/dose_difference.h"
#include "protondose/compare/dvh.h"
#include "protondose/compare/frames.h"
#include "protondose/compare/gamma.h"
#include "protondose/compare/render.h"
#include "protondose/compare/report.h"
#include "protondose/compare/resample.h"
#include "protondose/core/error.h"
#include "protondose/core/metaimage.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"

namespace {

using namespace protondose;
namespace fs = std::filesystem;

struct CompareArgs {
  std::string reference_path;
  std::string test_path;
  std::string gamma = "3%/3mm";
  std::string threshold = "10%";
  bool local = false;
  std::string structures_path;
  std::vector<std::string> rois;
  double prescription_gy = 0.0;
  std::string plan_path;
  std::string ct_dir;
  std::string require;
  bool json = false;
  std::string png_dir;
};

/// A dose read from RT Dose or MetaImage, with what is known about its frame.
struct LoadedDose {
  Volume<float> dose_gy;
  std::string format;                 // "rtdose" or "metaimage"
  std::string frame_of_reference_uid;  // empty for MetaImage
};

LoadedDose load_dose(const std::string& path) {
  LoadedDose d;
  if (fs::path(path).extension() == ".mhd") {
    d.dose_gy = read_metaimage(path);
    d.format = "metaimage";
    return d;
  }
  dicom::RtDose rt = dicom::read_rt_dose(path);
  if (rt.units != "GY") {
    throw InputError("RT Dose " + path + ": DoseUnits (3004,0002) is '" + rt.units +
                     "'; compare needs absolute doses in GY");
  }
  d.dose_gy = std::move(rt.dose_gy);
  d.format = "rtdose";
  d.frame_of_reference_uid = rt.frame_of_reference_uid;
  return d;
}

/// Parses "95", "95%" or "95 %" into a number in [low, high]; ConfigError otherwise.
double parse_percent(const std::string& option, const std::string& text, double low, double high) {
  static const std::regex pattern(R"(^\s*([0-9]*\.?[0-9]+)\s*%?\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, pattern))
    throw ConfigError("compare " + option + " '" + text + "': expected a percentage such as 10%");
  const double v = std::stod(m[1].str());
  if (v < low || v > high) {
    std::ostringstream s;
    s << "compare " << option << " '" << text << "': " << v << " % is outside [" << low << ", " << high << "]";
    throw ConfigError(s.str());
  }
  return v;
}

/// Parses "3%/3mm" (spaces and the units optional: "2/2") into (ΔD %, Δd mm).
std::pair<double, double> parse_gamma(const std::string& text) {
  static const std::regex pattern(R"(^\s*([0-9]*\.?[0-9]+)\s*%?\s*/\s*([0-9]*\.?[0-9]+)\s*(mm)?\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, pattern))
    throw ConfigError("compare --gamma '" + text + "': expected dose%/distance mm, e.g. 3%/3mm");
  return {std::stod(m[1].str()), std::stod(m[2].str())};
}

void check_same_frame(const std::string& what_a, const std::string& uid_a, const std::string& what_b,
                      const std::string& uid_b) {
  compare::require_same_frame_of_reference("compare: " + what_a, uid_a, what_b, uid_b);
}

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string describe(const std::string& path, const LoadedDose& d) {
  const Grid3& g = d.dose_gy.grid;
  float max = 0.0f;
  for (float v : d.dose_gy.data) max = std::max(max, v);
  std::ostringstream s;
  s << path << " (" << (d.format == "rtdose" ? "RT Dose" : "MetaImage") << ", " << g.size[0] << "x" << g.size[1]
    << "x" << g.size[2] << " voxels of " << g.spacing_mm[0] << "x" << g.spacing_mm[1] << "x" << g.spacing_mm[2]
    << " mm, max " << fmt(max, 5) << " Gy)";
  return s.str();
}

nlohmann::json dose_json(const std::string& path, const LoadedDose& d) {
  float max = 0.0f;
  for (float v : d.dose_gy.data) max = std::max(max, v);
  nlohmann::json j{{"path", path}, {"format", d.format}, {"grid", compare::to_json(d.dose_gy.grid)},
                   {"max_dose_gy", max}};
  j["frame_of_reference_uid"] = d.frame_of_reference_uid.empty() ? nlohmann::json(nullptr)
                                                                  : nlohmann::json(d.frame_of_reference_uid);
  return j;
}

void run_compare(const CompareArgs& a, cli::CliContext& ctx) {
  const auto [dose_percent, distance_mm] = parse_gamma(a.gamma);
  compare::GammaOptions gopt;
  gopt.dose_criterion_percent = dose_percent;
  gopt.distance_mm = distance_mm;
  gopt.local = a.local;
  gopt.threshold_percent = parse_percent("--threshold", a.threshold, 0.0, 99.999);
  gopt.keep_gamma_volume = !a.png_dir.empty();
  gopt.validate();
  std::optional<double> required_pass_rate;
  if (!a.require.empty()) required_pass_rate = parse_percent("--require", a.require, 0.0, 100.0);
  if (!a.rois.empty() && a.structures_path.empty())
    throw ConfigError("compare --roi needs --structures (an RT Structure Set)");

  const LoadedDose ref = load_dose(a.reference_path);
  const LoadedDose test = load_dose(a.test_path);
  check_same_frame("reference " + a.reference_path, ref.frame_of_reference_uid, "test " + a.test_path,
                   test.frame_of_reference_uid);

  nlohmann::json out;
  out["reference"] = dose_json(a.reference_path, ref);
  out["test"] = dose_json(a.test_path, test);

  const compare::GammaResult gamma = compare::gamma_3d(ref.dose_gy, test.dose_gy, gopt);
  out["gamma"] = compare::to_json(gopt, gamma);

  compare::DoseDifferenceOptions dopt;
  dopt.threshold_percent = gopt.threshold_percent;
  const compare::DoseDifferenceResult diff = compare::dose_difference(ref.dose_gy, test.dose_gy, dopt);
  out["dose_difference"] = compare::to_json(diff);

  // Depth-dose falloff along each beam axis of the plan.
  std::optional<IonPlan> plan;
  out["range"] = nlohmann::json::array();
  if (!a.plan_path.empty()) {
    plan = dicom::read_ion_plan(a.plan_path);
    check_same_frame("plan " + a.plan_path, plan->frame_of_reference_uid, "reference " + a.reference_path,
                     ref.frame_of_reference_uid);
    const Grid3& g = ref.dose_gy.grid;
    const double step_mm = 0.25 * std::min({g.spacing_mm[0], g.spacing_mm[1], g.spacing_mm[2]});
    for (const IonBeam& beam : plan->beams) {
      const Vec3 direction = compare::beam_direction_hfs(beam.gantry_angle_deg, beam.couch_angle_deg);
      const auto ref_falloff = compare::distal_falloff(
          compare::depth_profile_along_beam(ref.dose_gy, beam.isocenter_mm, direction, step_mm));
      const auto test_falloff = compare::distal_falloff(
          compare::depth_profile_along_beam(test.dose_gy, beam.isocenter_mm, direction, step_mm));
      out["range"].push_back({{"beam_number", beam.number},
                              {"beam_name", beam.name},
                              {"gantry_angle_deg", beam.gantry_angle_deg},
                              {"isocenter_mm", beam.isocenter_mm},
                              {"direction", direction},
                              {"reference", compare::to_json(ref_falloff)},
                              {"test", compare::to_json(test_falloff)},
                              {"delta_r80_mm", test_falloff.r80_mm - ref_falloff.r80_mm},
                              {"delta_r20_mm", test_falloff.r20_mm - ref_falloff.r20_mm}});
    }
  }

  // DVHs on the reference grid.
  std::vector<compare::Dvh> ref_dvhs, test_dvhs;
  out["dvh"] = nlohmann::json::array();
  if (!a.structures_path.empty()) {
    const dicom::StructureSet ss = dicom::read_rt_structure_set(a.structures_path);
    check_same_frame("structure set " + a.structures_path, ss.frame_of_reference_uid,
                     "reference " + a.reference_path, ref.frame_of_reference_uid);
    std::vector<std::string> names = a.rois;
    if (names.empty())
      for (const dicom::Roi& roi : ss.rois)
        if (!roi.contours.empty()) names.push_back(roi.name);
    if (names.empty()) throw InputError("structure set " + a.structures_path + ": no ROI with closed planar contours");
    const Volume<float> test_on_ref = test.dose_gy.grid == ref.dose_gy.grid
                                          ? test.dose_gy
                                          : compare::resample_trilinear(test.dose_gy, ref.dose_gy.grid);
    for (const std::string& name : names) {
      const Volume<std::uint8_t> mask = dicom::rasterize_roi(ss, name, ref.dose_gy.grid);
      compare::DvhOptions vopt;
      vopt.prescription_gy = a.prescription_gy;
      ref_dvhs.push_back(compare::compute_dvh(ref.dose_gy, mask, name, vopt));
      // The test DVH's V95 refers to the same prescription as the reference's.
      vopt.prescription_gy = ref_dvhs.back().prescription_gy;
      vopt.bin_width_gy = ref_dvhs.back().cumulative.size() > 1 ? ref_dvhs.back().cumulative[1].dose_gy : 0.0;
      test_dvhs.push_back(compare::compute_dvh(test_on_ref, mask, name, vopt));
      out["dvh"].push_back({{"roi", name},
                            {"reference", compare::to_json(ref_dvhs.back(), a.json)},
                            {"test", compare::to_json(test_dvhs.back(), a.json)}});
    }
  }

  // Figures through the reference maximum (or the first beam's isocentre).
  out["png"] = nlohmann::json::array();
  if (!a.png_dir.empty()) {
    std::error_code ec;
    fs::create_directories(a.png_dir, ec);
    if (ec) throw IoError("compare --png " + a.png_dir + ": cannot create the folder (" + ec.message() + ")");
    const Grid3& g = ref.dose_gy.grid;
    int centre[3];
    if (plan && !plan->beams.empty()) {
      const Vec3 c = g.continuous_index(plan->beams.front().isocenter_mm);
      for (int ax = 0; ax < 3; ++ax)
        centre[ax] = std::clamp(static_cast<int>(std::lround(c[ax])), 0, g.size[ax] - 1);
    } else {
      std::size_t best = 0;
      for (std::size_t n = 1; n < ref.dose_gy.data.size(); ++n)
        if (ref.dose_gy.data[n] > ref.dose_gy.data[best]) best = n;
      centre[0] = static_cast<int>(best % g.size[0]);
      centre[1] = static_cast<int>((best / g.size[0]) % g.size[1]);
      centre[2] = static_cast<int>(best / (static_cast<std::size_t>(g.size[0]) * g.size[1]));
    }
    Volume<float> ct_on_dose;
    compare::Background bg{&ref.dose_gy, 0.0, gamma.normalisation_dose_gy};
    if (!a.ct_dir.empty()) {
      const CtImage ct = dicom::read_ct_series(a.ct_dir);
      check_same_frame("CT " + a.ct_dir, ct.frame_of_reference_uid, "reference " + a.reference_path,
                       ref.frame_of_reference_uid);
      ct_on_dose = compare::resample_trilinear(ct.hu, g);
      bg = {&ct_on_dose, -1000.0, 1000.0};
    }
    const Volume<float> diff_volume = compare::dose_difference_volume(ref.dose_gy, test.dose_gy);
    Volume<std::uint8_t> show(g, 0);
    for (std::size_t n = 0; n < show.data.size(); ++n) show.data[n] = ref.dose_gy.data[n] >= gamma.threshold_dose_gy;
    const std::string criteria = fmt(gopt.dose_criterion_percent, 1) + "%/" + fmt(gopt.distance_mm, 1) + "MM " +
                                 (gopt.local ? "LOCAL" : "GLOBAL");
    for (compare::SlicePlane plane :
         {compare::SlicePlane::kAxial, compare::SlicePlane::kCoronal, compare::SlicePlane::kSagittal}) {
      const int fixed_axis = plane == compare::SlicePlane::kAxial ? 2 : (plane == compare::SlicePlane::kCoronal ? 1 : 0);
      const int index = centre[fixed_axis];
      const std::string name = compare::plane_name(plane);
      const std::string gamma_path = (fs::path(a.png_dir) / ("gamma_" + name + ".png")).string();
      compare::write_png(gamma_path, compare::render_gamma_slice(bg, *gamma.gamma, plane, index,
                                                                 "GAMMA " + criteria + " " + name + " " +
                                                                     std::to_string(index)));
      const std::string diff_path = (fs::path(a.png_dir) / ("dose_difference_" + name + ".png")).string();
      compare::write_png(diff_path, compare::render_difference_slice(
                                        bg, diff_volume, show, gamma.normalisation_dose_gy,
                                        gopt.dose_criterion_percent, plane, index,
                                        "TEST - REF " + name + " " + std::to_string(index)));
      out["png"].push_back(gamma_path);
      out["png"].push_back(diff_path);
    }
    if (!ref_dvhs.empty()) {
      const std::string dvh_path = (fs::path(a.png_dir) / "dvh.png").string();
      compare::write_png(dvh_path, compare::render_dvh(ref_dvhs, test_dvhs, "DVH"));
      out["png"].push_back(dvh_path);
    }
  }

  bool passed = true;
  if (required_pass_rate) {
    passed = gamma.pass_rate_percent >= *required_pass_rate;
    out["require"] = {{"pass_rate_percent", *required_pass_rate}, {"passed", passed}};
  } else {
    out["require"] = nullptr;
  }
  if (!passed) ctx.exit_code = 1;

  if (a.json) {
    std::cout << out.dump(2) << "\n";
    return;
  }
  if (ctx.quiet) return;
  std::ostringstream s;
  s << "reference  " << describe(a.reference_path, ref) << "\n";
  s << "test       " << describe(a.test_path, test) << "\n";
  s << "gamma " << fmt(gopt.dose_criterion_percent, 2) << " % / " << fmt(gopt.distance_mm, 2) << " mm "
    << (gopt.local ? "local" : "global") << ", threshold " << fmt(gopt.threshold_percent, 1) << " % ("
    << fmt(gamma.threshold_dose_gy, 5) << " Gy of " << fmt(gamma.normalisation_dose_gy, 5)
    << " Gy), search " << fmt(gamma.max_search_mm, 1) << " mm at " << fmt(gamma.resolution_mm, 2) << " mm\n";
  s << "  pass rate " << fmt(gamma.pass_rate_percent, 2) << " % (" << gamma.passed_voxels << " of "
    << gamma.evaluated_voxels << " voxels)  mean " << fmt(gamma.mean_gamma, 3) << "  p95 "
    << fmt(gamma.p95_gamma, 3) << "  max " << fmt(gamma.max_gamma, 3) << "\n";
  if (gamma.reference_voxels_outside_evaluated)
    s << "  note: " << gamma.reference_voxels_outside_evaluated
      << " reference voxels lie outside the test grid (test dose taken as 0 there)\n";
  s << "dose difference test - ref over " << diff.voxels << " voxels >= threshold: mean " << fmt(diff.mean_percent, 2)
    << " %  rms " << fmt(diff.rms_percent, 2) << " %  max " << fmt(diff.max_percent, 2) << " %  min "
    << fmt(diff.min_percent, 2) << " % (of " << fmt(diff.normalisation_dose_gy, 5) << " Gy)\n";
  for (const auto& r : out["range"]) {
    s << "beam " << r["beam_number"].get<int>() << " '" << r["beam_name"].get<std::string>() << "' (gantry "
      << fmt(r["gantry_angle_deg"].get<double>(), 1) << " deg), from the isocentre along the beam: R80 ref "
      << fmt(r["reference"]["r80_mm"].get<double>(), 2) << " mm, test " << fmt(r["test"]["r80_mm"].get<double>(), 2)
      << " mm (delta " << fmt(r["delta_r80_mm"].get<double>(), 2) << " mm); R20 delta "
      << fmt(r["delta_r20_mm"].get<double>(), 2) << " mm\n";
  }
  if (!ref_dvhs.empty()) {
    s << "DVH (Gy; ref / test)          D98              D95              D50              D2               mean"
         "             V95 (%)\n";
    for (std::size_t n = 0; n < ref_dvhs.size(); ++n) {
      const auto& r = ref_dvhs[n];
      const auto& t = test_dvhs[n];
      char line[512];
      std::snprintf(line, sizeof line,
                    "  %-26s %7.4f/%-7.4f  %7.4f/%-7.4f  %7.4f/%-7.4f  %7.4f/%-7.4f  %7.4f/%-7.4f  %6.2f/%-6.2f\n",
                    r.roi_name.substr(0, 26).c_str(), r.d98_gy, t.d98_gy, r.d95_gy, t.d95_gy, r.d50_gy, t.d50_gy,
                    r.d2_gy, t.d2_gy, r.mean_gy, t.mean_gy, r.v95_percent, t.v95_percent);
      s << line;
    }
    s << "  V95: % of the ROI receiving >= 95 % of "
      << (a.prescription_gy > 0.0 ? fmt(a.prescription_gy, 4) + " Gy (--prescription)"
                                  : std::string("the reference maximum in that ROI"))
      << "\n";
  }
  for (const auto& p : out["png"]) s << "wrote " << p.get<std::string>() << "\n";
  if (required_pass_rate)
    s << "require gamma pass rate >= " << fmt(*required_pass_rate, 2) << " %: " << (passed ? "PASSED" : "FAILED")
      << "\n";
  std::cout << s.str();
}

void add_compare(CLI::App& app, cli::CliContext& ctx) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Compare a test dose with a reference dose: gamma, dose difference, R80/R20, DVH");
  cmd->add_option("reference", a->reference_path, "Reference dose: RT Dose file or MetaImage .mhd")->required();
  cmd->add_option("test", a->test_path, "Test (evaluated) dose: RT Dose file or MetaImage .mhd")->required();
  cmd->add_option("--gamma", a->gamma, "Gamma criteria, dose %/distance mm")->capture_default_str();
  cmd->add_option("--threshold", a->threshold, "Low-dose threshold, % of the reference maximum")
      ->capture_default_str();
  cmd->add_flag("--local", a->local, "Local gamma (dose criterion per cent of the local reference dose)");
  cmd->add_option("--structures", a->structures_path, "RT Structure Set: DVHs of its ROIs");
  cmd->add_option("--roi", a->rois, "ROI name for DVHs (repeatable; default: all ROIs with contours)");
  cmd->add_option("--prescription", a->prescription_gy, "Prescription dose for V95 (Gy; default: ROI maximum)");
  cmd->add_option("--plan", a->plan_path, "RT Ion Plan: R80/R20 along each beam axis (HFS, couch 0)");
  cmd->add_option("--ct", a->ct_dir, "CT series folder: background of the --png figures");
  cmd->add_option("--require", a->require, "Exit with status 1 if the gamma pass rate is below this %");
  cmd->add_flag("--json", a->json, "Print JSON (docs/formats/compare-json.md) instead of a summary");
  cmd->add_option("--png", a->png_dir, "Write gamma, dose-difference and DVH figures (PNG) into this folder");
  cmd->callback([a, &ctx]() { run_compare(*a, ctx); });
}

const cli::CommandRegistration kCompareRegistration{"compare", &add_compare};

}  // namespace
