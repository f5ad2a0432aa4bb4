#pragma once
/// \file inspect.h
/// Summaries of DICOM inputs for `protondose inspect`: what a physicist checks
/// before computing. JSON keys are documented in docs/formats/inspect-json.md.

#include <nlohmann/json.hpp>

#include <string>

namespace protondose::dicom {

/// Summarises a file (RT Ion Plan, RT Dose, RT Structure Set, CT slice) or a
/// folder (its CT series, one entry per series, plus the other DICOM objects
/// in it). Returns {"path": ..., "objects": [ {"kind": "ct_series"|"ion_plan"|
/// "rt_dose"|"rt_struct"|"unsupported", ...}, ... ]}.
/// Throws IoError for a missing path, InputError when nothing in it is DICOM;
/// errors while reading one object are reported in that object's "error"
/// member instead, so one bad file does not hide the others.
nlohmann::json inspect_path(const std::string& file_or_dir);

/// Human-readable table of an inspect_path() result.
std::string format_inspect_text(const nlohmann::json& summary);

}  // namespace protondose::dicom
