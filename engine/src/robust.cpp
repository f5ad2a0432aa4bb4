// Robustness scenarios: setup shifts × range errors, min/max dose over them.
#include "protondose/engine/robust.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/engine/batch.h"

namespace protondose::engine {

std::vector<RobustScenario> standard_scenarios(double setup_mm, double range_pct) {
  if (!(setup_mm >= 0) || !std::isfinite(setup_mm))
    throw ConfigError("--setup-mm " + std::to_string(setup_mm) + ": must be a finite number >= 0 mm");
  if (!(range_pct >= 0 && range_pct < 50))
    throw ConfigError("--range-pct " + std::to_string(range_pct) + ": accepted [0, 50) %");
  struct Setup {
    std::string name;
    Vec3 shift;
  };
  std::vector<Setup> setups{{"nominal", {0, 0, 0}}};
  const char* axis_names[3] = {"x", "y", "z"};
  for (int a = 0; a < 3; ++a)
    for (int sign : {+1, -1}) {
      Vec3 s{0, 0, 0};
      s[a] = sign * setup_mm;
      setups.push_back({std::string(sign > 0 ? "+" : "-") + axis_names[a], s});
    }
  std::vector<RobustScenario> out;
  for (const Setup& s : setups)
    for (int r : {0, +1, -1}) {
      RobustScenario sc;
      sc.shift_mm = s.shift;
      sc.rsp_scale = 1.0 + r * range_pct / 100.0;
      // "nominal", "+x3mm", "nominal_range+3.5%", "-z3mm_range-3.5%".
      char name[96];
      if (s.name == "nominal") {
        std::snprintf(name, sizeof name, "nominal");
      } else {
        std::snprintf(name, sizeof name, "%s%gmm", s.name.c_str(), setup_mm);
      }
      std::string full = name;
      if (r != 0) {
        std::snprintf(name, sizeof name, "_range%+g%%", r * range_pct);
        full += name;
      }
      sc.name = full;
      out.push_back(sc);
    }
  return out;
}

std::vector<RobustScenario> load_scenarios_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot open the scenario file '" + path + "'");
  std::vector<RobustScenario> out;
  std::set<std::string> names;
  std::string line;
  int line_no = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string at = path + ", line " + std::to_string(line_no);
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) {
      const auto b = cell.find_first_not_of(" \t");
      const auto e = cell.find_last_not_of(" \t");
      f.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    if (!header) {
      if (f != std::vector<std::string>{"name", "x_mm", "y_mm", "z_mm", "range_pct"})
        throw InputError(at + ": the header must be 'name,x_mm,y_mm,z_mm,range_pct', got '" + line + "'");
      header = true;
      continue;
    }
    if (f.size() != 5) throw InputError(at + ": " + std::to_string(f.size()) + " fields, expected 5");
    RobustScenario s;
    s.name = f[0];
    if (s.name.empty()) throw InputError(at + ": empty scenario name");
    if (!names.insert(s.name).second) throw InputError(at + ": scenario name '" + s.name + "' appears twice");
    double v[4];
    static const char* kCols[4] = {"x_mm", "y_mm", "z_mm", "range_pct"};
    for (int c = 0; c < 4; ++c) {
      std::size_t used = 0;
      try {
        v[c] = std::stod(f[static_cast<std::size_t>(c) + 1], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != f[static_cast<std::size_t>(c) + 1].size() || !std::isfinite(v[c]))
        throw InputError(at + ": column " + kCols[c] + " '" + f[static_cast<std::size_t>(c) + 1] + "' is not a number");
    }
    if (!(v[3] > -50 && v[3] < 50)) throw InputError(at + ": range_pct " + f[4] + " outside (-50, 50) %");
    s.shift_mm = {v[0], v[1], v[2]};
    s.rsp_scale = 1.0 + v[3] / 100.0;
    if (out.empty() && (s.shift_mm != Vec3{0, 0, 0} || v[3] != 0.0))
      throw InputError(at + ": the first scenario is the nominal and must have zero shift and range error");
    out.push_back(s);
  }
  if (!header) throw InputError(path + ": no header line");
  if (out.empty()) throw InputError(path + ": no scenarios");
  return out;
}

RobustResult run_robust(const physics::BeamModel& machine, const physics::HuCurve& hu_curve, const CtImage& ct,
                        const IonPlan& plan, const std::vector<RobustScenario>& scenarios,
                        const RobustOptions& options,
                        const std::function<void(std::size_t, const Volume<float>&)>& on_scenario) {
  if (scenarios.empty()) throw ConfigError("robust: no scenarios");
  if (scenarios[0].shift_mm != Vec3{0, 0, 0} || scenarios[0].rsp_scale != 1.0)
    throw ConfigError("robust: the first scenario ('" + scenarios[0].name + "') must be the nominal");
  const auto t0 = std::chrono::steady_clock::now();
  RobustResult result;
  result.scenarios = scenarios;
  // One warm engine for every scenario, and the CT converted once per range
  // error (RSP × scale): the depth-dose cache, the executor and (on a GPU
  // backend) the CTs in device memory are reused by every setup shift.
  const DoseEngine engine(machine, hu_curve, options.engine);
  std::map<double, std::shared_ptr<const PreparedCt>> prepared;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    const RobustScenario& s = scenarios[i];
    const auto ts = std::chrono::steady_clock::now();
    std::shared_ptr<const PreparedCt>& scaled = prepared[s.rsp_scale];
    if (!scaled) scaled = engine.prepare(ct, s.rsp_scale);
    const bool zero_shift = s.shift_mm == Vec3{0, 0, 0};
    DoseResult r = engine.compute(*scaled, zero_shift ? plan : shifted_plan(plan, s.shift_mm));
    result.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count());
    result.timings.push_back(r.timings);
    Volume<float> dose = std::move(r.dose_gy);
    if (r.fractions != 1)
      for (float& v : dose.data) v = static_cast<float>(v * r.fractions);
    if (i == 0) {
      result.nominal_gy = dose;
      result.min_gy = dose;
      result.max_gy = dose;
    } else {
      if (dose.grid != result.min_gy.grid)
        throw InternalError("robust: scenario '" + s.name + "' gave a dose on another grid than the nominal");
      for (std::size_t v = 0; v < dose.data.size(); ++v) {
        result.min_gy.data[v] = std::min(result.min_gy.data[v], dose.data[v]);
        result.max_gy.data[v] = std::max(result.max_gy.data[v], dose.data[v]);
      }
    }
    if (on_scenario) on_scenario(i, dose);
  }
  result.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

nlohmann::json dvh_band(const std::vector<nlohmann::json>& per_scenario) {
  nlohmann::json band = nlohmann::json::object();
  if (per_scenario.empty()) return band;
  for (const auto& [roi, nominal] : per_scenario[0].items()) {
    nlohmann::json b;
    for (const char* k : {"d98_gy", "d95_gy", "d50_gy", "d2_gy", "mean_gy"}) {
      double lo = nominal.at(k).get<double>(), hi = lo;
      for (std::size_t i = 1; i < per_scenario.size(); ++i) {
        if (!per_scenario[i].contains(roi))
          throw InternalError("robust: scenario " + std::to_string(i) + " has no DVH of '" + roi + "'");
        const double v = per_scenario[i][roi].at(k).get<double>();
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      b[k] = {{"min", lo}, {"nominal", nominal.at(k)}, {"max", hi}};
    }
    band[roi] = b;
  }
  return band;
}

}  // namespace protondose::engine
