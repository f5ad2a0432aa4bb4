#pragma once
/// \file batch_dicom_io.h
/// The DICOM and comparison side of `protondose batch` and `robust`: BatchIo
/// hooks built on dicom/ and compare/. Header-only on purpose: the engine
/// library does not link dicom/ or compare/ (docs/engine.md, layering); only
/// targets that link protondose::dicom and protondose::compare (the CLI,
/// test_batch) include this header.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protondose/compare/dvh.h"
#include "protondose/compare/gamma.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"
#include "protondose/dicom/spatial_registration.h"
#include "protondose/engine/batch.h"

namespace protondose::engine::dicom_io {

/// Reads the plan at plan_path for `ct`: when the CT states no PatientPosition,
/// takes the one all beams' PatientSetupSequence agree on (InputError when they
/// differ or none states one), then checks both share a FrameOfReferenceUID.
/// The compute command and the batch read their inputs through this.
///
/// `registered`: the plan's frame is related to the CT's by a registration
/// (batch key `registration`), so the frames are not compared, and `ct` (the
/// CT as re-expressed in the plan's frame) takes the plan's setup position
/// wherever the beams state one, the CT's otherwise: the beams' geometry is
/// defined in the plan's frame, whatever position the new CT was scanned in.
inline IonPlan read_plan_for_ct(const std::string& plan_path, const std::string& ct_dir, CtImage& ct,
                                bool registered = false) {
  const dicom::IonPlanReadResult read = dicom::read_ion_plan_detailed(plan_path);
  // The position all beams' PatientSetupSequence agree on ("" when none states one).
  auto plan_position = [&](const char* otherwise) {
    std::string position;
    for (const auto& b : read.beams) {
      if (b.patient_position.empty()) continue;
      if (!position.empty() && position != b.patient_position)
        throw InputError(plan_path + ": beams state different PatientPosition ('" + position + "', '" +
                         b.patient_position + "')" + otherwise);
      position = b.patient_position;
    }
    return position;
  };
  if (registered) {
    const std::string position = plan_position("");
    if (!position.empty() && position != ct.patient_position)
      spdlog::info("{}: the plan's setup position {} is used in the plan's frame (the CT states '{}')", plan_path,
                   position, ct.patient_position);
    if (!position.empty()) ct.patient_position = position;
    if (ct.patient_position.empty())
      throw InputError(ct_dir + ": the CT has no PatientPosition (0018,5100) and the plan's "
                       "PatientSetupSequence states none either");
    return read.plan;
  }
  if (ct.patient_position.empty()) {
    const std::string position = plan_position(" and the CT states none");
    if (position.empty())
      throw InputError(ct_dir + ": the CT has no PatientPosition (0018,5100) and the plan's "
                       "PatientSetupSequence states none either");
    spdlog::warn("the CT has no PatientPosition (0018,5100); using the plan's PatientSetupSequence: {}", position);
    ct.patient_position = position;
  }
  dicom::check_same_frame_of_reference(ct, read.plan);
  return read.plan;
}

/// The rigid map from the plan's frame of reference onto the CT's, from the
/// Spatial Registration at `path` (dicom/spatial_registration.h: the standard's
/// semantics, RIGID matrices only). Errors as read_spatial_registration and
/// registration_between; the frames are named by UID.
inline RigidTransform read_ct_from_plan(const std::string& path, const std::string& plan_frame_uid,
                                        const std::string& ct_frame_uid) {
  const dicom::SpatialRegistration reg = dicom::read_spatial_registration(path);
  return dicom::registration_between(reg, plan_frame_uid, ct_frame_uid);
}

/// DVH metrics of one structure as JSON (Gy).
inline nlohmann::json dvh_json(const compare::Dvh& d) {
  return {{"d98_gy", d.d98_gy}, {"d95_gy", d.d95_gy}, {"d50_gy", d.d50_gy}, {"d2_gy", d.d2_gy},
          {"mean_gy", d.mean_gy}, {"min_gy", d.min_gy}, {"max_gy", d.max_gy}, {"volume_cc", d.volume_cc}};
}

/// Per structure of the set: DVH metrics of `dose` (and of `reference`, with
/// the change in Gy and per cent, when given). ROIs that cannot be rasterised
/// on the grid (no contours, empty mask) are listed under "skipped" with why.
inline nlohmann::json structure_metrics(const dicom::StructureSet& set, const Volume<float>& dose,
                                        const Volume<float>* reference) {
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json skipped = nlohmann::json::object();
  for (const dicom::Roi& roi : set.rois) {
    try {
      const Volume<std::uint8_t> mask = dicom::rasterize_roi(set, roi.name, dose.grid);
      nlohmann::json s = dvh_json(compare::compute_dvh(dose, mask, roi.name));
      if (reference) {
        const Volume<std::uint8_t> ref_mask =
            reference->grid == dose.grid ? mask : dicom::rasterize_roi(set, roi.name, reference->grid);
        const nlohmann::json r = dvh_json(compare::compute_dvh(*reference, ref_mask, roi.name));
        s["reference"] = r;
        nlohmann::json change_gy, change_pct;
        for (const char* k : {"d98_gy", "d95_gy", "d50_gy", "d2_gy", "mean_gy", "min_gy", "max_gy"}) {
          const double now = s[k].get<double>(), ref = r[k].get<double>();
          change_gy[k] = now - ref;
          change_pct[k] = ref > 0 ? nlohmann::json(100.0 * (now - ref) / ref) : nlohmann::json(nullptr);
        }
        s["change_gy"] = change_gy;
        s["change_percent"] = change_pct;
      }
      out[roi.name] = s;
    } catch (const InputError& e) {
      skipped[roi.name] = e.what();
    }
  }
  return {{"structures", out}, {"structures_skipped", skipped}};
}

/// Lower and upper envelope of cumulative DVHs of one structure over
/// scenarios, computed with one common bin width (DvhOptions::bin_width_gy), so
/// that point b of every curve is at b × width; a shorter curve has 0 % beyond
/// its end. The envelopes carry roi_name + " min" / " max". InternalError when
/// the curves' dose levels differ (different bin widths); InputError when empty.
inline std::pair<compare::Dvh, compare::Dvh> dvh_envelope(const std::vector<compare::Dvh>& scenarios) {
  if (scenarios.empty()) throw InputError("DVH envelope of no scenarios");
  compare::Dvh lo, hi;
  lo.roi_name = scenarios[0].roi_name + " min";
  hi.roi_name = scenarios[0].roi_name + " max";
  std::size_t points = 0;
  for (const auto& d : scenarios) points = std::max(points, d.cumulative.size());
  for (std::size_t b = 0; b < points; ++b) {
    double level = -1, vmin = 1e300, vmax = -1e300;
    for (const auto& d : scenarios) {
      double v = 0;
      if (b < d.cumulative.size()) {
        if (level >= 0 && std::abs(d.cumulative[b].dose_gy - level) > 1e-9 * (1 + level))
          throw InternalError("DVH envelope of '" + scenarios[0].roi_name + "': scenarios have different bin widths");
        level = d.cumulative[b].dose_gy;
        v = d.cumulative[b].volume_percent;
      }
      vmin = std::min(vmin, v);
      vmax = std::max(vmax, v);
    }
    lo.cumulative.push_back({level, vmin});
    hi.cumulative.push_back({level, vmax});
  }
  for (const auto& d : scenarios) {
    hi.max_gy = std::max(hi.max_gy, d.max_gy);
    lo.max_gy = hi.max_gy;
  }
  return {lo, hi};
}

/// InputError when a comparison input's FrameOfReferenceUID is stated and is
/// not the dose's (`dose_frame_uid`, the CT's): patient coordinates of two
/// frames cannot be compared point by point. For a job with `registration`
/// the dose is in the new CT's frame, so a planned dose (plan's frame) must
/// first be brought there; protondose does not resample it.
inline void check_comparison_frame(const BatchJob& job, const char* key, const std::string& path,
                                   const std::string& frame_uid, const std::string& dose_frame_uid) {
  if (frame_uid.empty() || dose_frame_uid.empty() || frame_uid == dose_frame_uid) return;
  throw InputError("job '" + job.id + "': key '" + key + "': '" + path + "' is in frame of reference '" + frame_uid +
                   "', the dose in the CT's '" + dose_frame_uid + "'" +
                   (job.registration_path.empty()
                        ? std::string()
                        : "; with a registration the dose is in the new CT's frame: give a " + std::string(key) +
                              " in that frame"));
}

/// Gamma (3 %/3 mm global, 10 % threshold unless told) and DVH metrics of a
/// job's dose, which lies in frame `dose_frame_uid` (the CT's). The reference
/// dose and structure set must be in that frame too (check_comparison_frame).
inline nlohmann::json evaluate_job(const BatchJob& job, const Volume<float>& plan_dose_gy,
                                   const compare::GammaOptions& gamma_options, const std::string& dose_frame_uid = "") {
  nlohmann::json m = nlohmann::json::object();
  std::optional<dicom::RtDose> ref;
  if (!job.reference_dose_path.empty()) {
    ref = dicom::read_rt_dose(job.reference_dose_path);
    check_comparison_frame(job, "reference_dose", job.reference_dose_path, ref->frame_of_reference_uid, dose_frame_uid);
    const compare::GammaResult g = compare::gamma_3d(ref->dose_gy, plan_dose_gy, gamma_options);
    char criteria[64];
    std::snprintf(criteria, sizeof criteria, "%g%%/%gmm global", gamma_options.dose_criterion_percent,
                  gamma_options.distance_mm);
    m["gamma"] = {{"pass_rate_percent", g.pass_rate_percent},
                  {"criteria", criteria},
                  {"mean", g.mean_gamma},
                  {"p95", g.p95_gamma},
                  {"evaluated_voxels", g.evaluated_voxels}};
  }
  if (!job.structures_path.empty()) {
    const dicom::StructureSet set = dicom::read_rt_structure_set(job.structures_path);
    check_comparison_frame(job, "structures", job.structures_path, set.frame_of_reference_uid, dose_frame_uid);
    const nlohmann::json s = structure_metrics(set, plan_dose_gy, ref ? &ref->dose_gy : nullptr);
    m["structures"] = s["structures"];
    m["structures_skipped"] = s["structures_skipped"];
  }
  return m;
}

/// The hooks of run_batch(): DICOM CT and plan in, RT Dose out, comparison.
inline BatchIo make_batch_io(const compare::GammaOptions& gamma_options = {}) {
  BatchIo io;
  io.read_ct = [](const std::string& dir) { return dicom::read_ct_series(dir); };
  io.read_plan = [](const BatchJob& job, CtImage& ct) {
    return read_plan_for_ct(job.plan_path, job.ct_dir, ct, !job.registration_path.empty());
  };
  io.read_registration = [](const BatchJob& job, const std::string& plan_frame_uid, const std::string& ct_frame_uid) {
    return read_ct_from_plan(job.registration_path, plan_frame_uid, ct_frame_uid);
  };
  io.write_dose = [](const BatchJob& job, const Volume<float>& dose, const IonPlan& plan, const CtImage& ct) {
    dicom::RtDoseWriteOptions w;
    w.plan = &plan;
    w.ct = &ct;
    dicom::write_rt_dose(job.out_path, dose, w);
  };
  io.evaluate = [gamma_options](const BatchJob& job, const Volume<float>& dose, const CtImage& ct) {
    return evaluate_job(job, dose, gamma_options, ct.frame_of_reference_uid);
  };
  return io;
}

}  // namespace protondose::engine::dicom_io
