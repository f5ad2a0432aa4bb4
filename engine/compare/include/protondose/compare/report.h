#pragma once
/// \file report.h
/// JSON forms of the comparison results, as printed by `protondose compare
/// --json` (keys documented in docs/formats/compare-json.md). Doses in Gy,
/// lengths in mm, percentages in per cent; the key names say so.

#include <nlohmann/json.hpp>

#include "protondose/compare/dose_difference.h"
#include "protondose/compare/dvh.h"
#include "protondose/compare/gamma.h"

namespace protondose::compare {

/// Criteria and results of a gamma comparison (the γ volume is not included).
nlohmann::json to_json(const GammaOptions& options, const GammaResult& result);

/// Dose-difference statistics.
nlohmann::json to_json(const DoseDifferenceResult& result);

/// DVH metrics; with `with_curve`, also the cumulative curve as
/// {"dose_gy": [...], "volume_percent": [...]}.
nlohmann::json to_json(const Dvh& dvh, bool with_curve);

/// R80/R20 of a depth profile.
nlohmann::json to_json(const DistalFalloff& falloff);

/// size, spacing_mm, origin_mm and axes of a grid.
nlohmann::json to_json(const Grid3& grid);

}  // namespace protondose::compare
