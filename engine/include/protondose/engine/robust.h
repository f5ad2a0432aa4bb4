#pragma once
/// \file robust.h
/// `protondose robust`: the standard robustness evaluation of a plan on one CT
/// as a batch of setup and range scenarios, the voxel-wise minimum and maximum
/// dose over them (docs/batch.md, "Robustness").

#include <functional>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protondose/core/plan.h"
#include "protondose/engine/dose_engine.h"

namespace protondose::engine {

/// One error scenario.
struct RobustScenario {
  std::string name;
  /// Setup shift of the patient relative to the isocentre, patient frame (mm);
  /// applied as shifted_plan() does (isocentres moved by −shift_mm).
  Vec3 shift_mm{0.0, 0.0, 0.0};
  double rsp_scale = 1.0;  ///< range error: the HU curve's RSP × rsp_scale (> 0)
};

/// Nominal, then each setup (nominal and ±setup_mm along x, y, z) combined with
/// each range error (0, +range_pct, −range_pct): 7 × 3 = 21 scenarios with the
/// nominal first. ConfigError for a negative or non-finite setup_mm, or
/// range_pct outside [0, 50).
std::vector<RobustScenario> standard_scenarios(double setup_mm = 3.0, double range_pct = 3.5);

/// Reads a scenario CSV (docs/batch.md): header "name,x_mm,y_mm,z_mm,range_pct",
/// '#' comments; the first scenario is the nominal and must be zero shift and
/// zero range error. IoError if unreadable; InputError naming the file, line
/// and value for a malformed line, a duplicate name or a non-nominal first row.
std::vector<RobustScenario> load_scenarios_csv(const std::string& path);

struct RobustOptions {
  DoseEngineOptions engine;  ///< shared by every scenario (backend, grid, ...)
};

/// Doses over the scenarios (plan dose: all fractions, Gy).
struct RobustResult {
  std::vector<RobustScenario> scenarios;
  Volume<float> nominal_gy;  ///< scenarios[0]
  Volume<float> min_gy;      ///< voxel-wise minimum over all scenarios
  Volume<float> max_gy;      ///< voxel-wise maximum over all scenarios
  std::vector<double> seconds;  ///< compute time of each scenario (CT preparation included)
  std::vector<StageTimings> timings;  ///< the engine's stage timings of each scenario
  double total_s = 0;
};

/// Computes every scenario (one warm engine; the CT prepared once per
/// distinct rsp_scale, RSP scaled as DoseEngine::prepare does) and calls on_scenario(index, plan dose) after each, in order.
/// scenarios[0] must be the nominal (zero shift, scale 1: ConfigError
/// otherwise). The engine's exceptions propagate.
RobustResult run_robust(const physics::BeamModel& machine, const physics::HuCurve& hu_curve, const CtImage& ct,
                        const IonPlan& plan, const std::vector<RobustScenario>& scenarios,
                        const RobustOptions& options,
                        const std::function<void(std::size_t, const Volume<float>&)>& on_scenario = {});

/// The DVH band over scenarios: per structure and metric (d98_gy, d95_gy,
/// d50_gy, d2_gy, mean_gy) {"min", "nominal", "max"}, from each scenario's
/// {"ROI": {"d95_gy": ..., ...}} (index 0 the nominal). A structure missing
/// from a scenario is an InternalError (every scenario uses the same masks).
nlohmann::json dvh_band(const std::vector<nlohmann::json>& per_scenario_structures);

}  // namespace protondose::engine
