#pragma once
/// \file manifest.h
/// The job list of `protondose batch`: a JSON or CSV manifest
/// (docs/formats/batch-manifest.md), parsed, its relative paths resolved
/// against the manifest's folder, and validated as a whole before any work.

#include <optional>
#include <string>
#include <vector>

#include "protondose/core/grid.h"

namespace protondose::engine {

/// One dose recomputation of a batch. Paths are absolute after load_manifest().
struct BatchJob {
  std::string id;              ///< unique in the manifest; names the job in records and errors
  std::string ct_dir;          ///< folder of the CT series
  std::string plan_path;       ///< RT Ion Plan file
  std::string out_path;        ///< RT Dose output file (unique in the manifest)
  std::string structures_path;      ///< RT Structure Set ("" = none)
  std::string reference_dose_path;  ///< RT Dose to compare with ("" = none)
  /// DICOM Spatial Registration mapping the plan's frame of reference onto the
  /// CT's ("" = none: both share one frame); rigid only (docs/batch.md).
  std::string registration_path;
  /// Setup shift of the patient relative to the isocentre, patient frame (mm):
  /// the dose is computed with every beam's isocentre moved by −shift_mm.
  Vec3 shift_mm{0.0, 0.0, 0.0};
  double rsp_scale = 1.0;           ///< multiplies the HU curve's RSP (range scenario), > 0
  std::optional<double> grid_mm;    ///< output dose grid spacing (mm); absent: the CT grid
  std::string backend;              ///< "cpu", "gpu", "gpu-gather"; "" = the batch's default
  std::string machine;              ///< machine name or folder; "" = the plan's TreatmentMachineName
  std::string hu_curve;             ///< HU calibration CSV; "" = the shipped default
  int position = 0;                 ///< 1-based index in the manifest (CSV: line number)
};

struct Manifest {
  std::string path;    ///< the manifest file (for messages)
  std::string folder;  ///< relative paths resolve against this folder
  std::vector<BatchJob> jobs;
};

/// The keys a job may have (JSON object members, CSV header columns).
const std::vector<std::string>& manifest_job_keys();

/// Parses a JSON manifest: either an array of job objects, or an object with
/// "jobs" (that array) and optionally "defaults" (an object of job keys, other
/// than id and out, that every job inherits unless it sets them). Paths are
/// resolved against `folder`. Throws InputError naming `path`, the job
/// (id or position) and the key for malformed JSON, unknown keys, wrong types,
/// missing required keys or out-of-range values. Does not touch the file system.
Manifest parse_manifest_json(const std::string& text, const std::string& path, const std::string& folder);

/// Parses a CSV manifest: the first non-comment line is the header (job keys),
/// '#' lines are comments, empty cells are absent values, "shift_mm" is three
/// numbers separated by spaces or semicolons, fields may be double-quoted.
/// Errors as parse_manifest_json, naming the line.
Manifest parse_manifest_csv(const std::string& text, const std::string& path, const std::string& folder);

/// Checks the manifest as a whole and throws one InputError listing every
/// problem (job id and key each): duplicate ids, duplicate outputs (also an
/// output equal to another job's input), missing CT folders or files, outputs
/// whose folder does not exist. (The contents of DICOM inputs, a Spatial
/// Registration included, are read and checked per job when it runs.)
void validate_manifest(const Manifest& manifest);

/// Reads `path` (.json or .csv, by extension; IoError if unreadable,
/// InputError for another extension), parses and validates it.
Manifest load_manifest(const std::string& path);

}  // namespace protondose::engine
