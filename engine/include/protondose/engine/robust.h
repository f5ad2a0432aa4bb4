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
  /// Shared by every scenario (backend, grid, ...). With several workers each
  /// gets a copy with its own gpu_device and, on the CPU backend when threads
  /// is 0, threads = max(1, cores / workers).
  DoseEngineOptions engine;
  /// Scenario workers computing in parallel (≥ 1), each a thread with its own
  /// DoseEngine; at most one per scenario is started.
  int workers = 1;
  /// GPU backends: worker w runs on gpu_devices[w mod size] (each ≥ 0); empty:
  /// every worker on engine.gpu_device. Must be empty on the CPU backend.
  std::vector<int> gpu_devices;

  /// Throws ConfigError naming the option (--workers, --gpus) when workers < 1,
  /// gpu_devices is given with the CPU backend or holds a negative index, and
  /// the engine options' own ConfigError.
  void validate() const;
};

/// Doses over the scenarios (plan dose: all fractions, Gy).
struct RobustResult {
  std::vector<RobustScenario> scenarios;
  Volume<float> nominal_gy;  ///< scenarios[0]
  Volume<float> min_gy;      ///< voxel-wise minimum over all scenarios
  Volume<float> max_gy;      ///< voxel-wise maximum over all scenarios
  /// Compute time of each scenario on its worker (CT preparation, or waiting
  /// for another worker preparing the same rsp_scale, included).
  std::vector<double> seconds;
  std::vector<StageTimings> timings;  ///< the engine's stage timings of each scenario
  std::vector<int> devices;  ///< CUDA device of the worker that computed each scenario; −1 on the CPU backend
  std::vector<int> worker_indices;  ///< the worker (0 .. workers − 1) that computed each scenario
  int workers = 1;           ///< workers started: min(options.workers, scenario count)
  /// When each scenario's delivery (min/max, on_scenario) ended, seconds from
  /// the start of run_robust (`protondose robust` counts its warm rate from
  /// delivered_s[0]).
  std::vector<double> delivered_s;
  double total_s = 0;
};

/// Computes every scenario and calls on_scenario(index, plan dose) for each.
/// The CT is converted once, each distinct rsp_scale scales its RSP
/// (rescaled_ct: bitwise DoseEngine::prepare at that scale), and every
/// worker shares them; each worker keeps its own warm engine. The scenarios
/// are handed out one at a time to whichever worker is free.
///
/// Order: on_scenario and the min/max update run on the calling thread, in
/// scenario order 0, 1, 2, ..., once each, whatever order the workers finish
/// in; at most 2 × workers finished doses wait for their turn (a worker does
/// not start a scenario further ahead).
///
/// Errors: scenarios[0] must be the nominal (zero shift, scale 1: ConfigError
/// otherwise); options.validate()'s ConfigError. The first exception of a
/// worker's engine or of on_scenario stops the workers from starting further
/// scenarios, no further scenario is delivered, and it is rethrown, with its
/// type, once every worker has finished the scenario it was computing.
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
