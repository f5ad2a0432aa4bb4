// Robustness scenarios: setup shifts × range errors, min/max dose over them.
#include "protondose/engine/robust.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "made_once.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
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

void RobustOptions::validate() const {
  if (workers < 1) throw ConfigError("--workers " + std::to_string(workers) + ": need at least 1 scenario worker");
  if (!gpu_devices.empty() && engine.backend == Backend::kCpu)
    throw ConfigError("--gpus: GPU devices given (" + std::to_string(gpu_devices.size()) +
                      ") with the cpu backend, which runs on no GPU; use --workers for CPU workers");
  for (int d : gpu_devices)
    if (d < 0) throw ConfigError("--gpus: device index " + std::to_string(d) + " is negative");
  engine.validate();
}

namespace {

/// One computed scenario on its way from a worker to the caller.
struct ScenarioDose {
  Volume<float> dose_gy;  ///< plan dose (all fractions)
  double seconds = 0;
  StageTimings timings;
  int device = -1;
  int worker = 0;
};

/// The engine options of worker `worker` of `workers`.
DoseEngineOptions worker_engine_options(const RobustOptions& options, int worker, int workers) {
  DoseEngineOptions o = options.engine;
  if (o.backend == Backend::kCpu) {
    // The workers share the cores; a caller's explicit thread count stands.
    if (o.threads == 0 && workers > 1) o.threads = std::max(1, default_thread_count() / workers);
  } else {
    if (!options.gpu_devices.empty())
      o.gpu_device = options.gpu_devices[static_cast<std::size_t>(worker) % options.gpu_devices.size()];
    // The workers on one device compute at the same time: each plans its
    // stacks for its share of the device's memory.
    const int sharing = options.gpu_devices.empty() ? workers : workers_on_device(options.gpu_devices, workers, o.gpu_device);
    o.gpu_memory_share = options.engine.gpu_memory_share / std::max(1, sharing);
  }
  return o;
}

}  // namespace

RobustResult run_robust(const physics::BeamModel& machine, const physics::HuCurve& hu_curve, const CtImage& ct,
                        const IonPlan& plan, const std::vector<RobustScenario>& scenarios,
                        const RobustOptions& options,
                        const std::function<void(std::size_t, const Volume<float>&)>& on_scenario) {
  options.validate();
  if (scenarios.empty()) throw ConfigError("robust: no scenarios");
  if (scenarios[0].shift_mm != Vec3{0, 0, 0} || scenarios[0].rsp_scale != 1.0)
    throw ConfigError("robust: the first scenario ('" + scenarios[0].name + "') must be the nominal");
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = scenarios.size();
  const int workers = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(options.workers), n));
  RobustResult result;
  result.scenarios = scenarios;
  result.workers = workers;
  // Declared before any engine: the engines' executors point into the prepared CTs.
  // The CT prepared once per rsp_scale for every worker. A PreparedCt depends
  // only on the HU curve and the options every worker's engine shares (output
  // grid, HU policy, scattering model; DoseEngine::compute), and each engine's
  // executor keeps its own device copy keyed by PreparedCt::id: one preparation
  // serves all workers.
  MadeOnce<double, std::shared_ptr<const PreparedCt>> prepared;

  // Scenario i on a worker's warm engine (the depth-dose cache, the executor
  // and, on a GPU backend, the CTs in device memory are reused by every
  // scenario of the worker) and the plan it prepared once: a setup scenario
  // moves that plan's isocentres (PreparedPlan::shifted), sharing its spots
  // and tables, which a GPU engine keeps in device memory.
  const auto compute_scenario = [&](const DoseEngine& engine, const PreparedPlan& prepared_plan, int worker,
                                    std::size_t i) {
    const RobustScenario& s = scenarios[i];
    const auto ts = std::chrono::steady_clock::now();
    // The HU are converted once; a range scenario scales the nominal's RSP.
    const std::shared_ptr<const PreparedCt> nominal = prepared.get(1.0, nullptr, [&] { return engine.prepare(ct); });
    const std::shared_ptr<const PreparedCt> scaled =
        s.rsp_scale == 1.0 ? nominal
                           : prepared.get(s.rsp_scale, nullptr, [&] { return rescaled_ct(*nominal, s.rsp_scale); });
    const bool zero_shift = s.shift_mm == Vec3{0, 0, 0};
    DoseResult r = engine.compute(*scaled, zero_shift ? prepared_plan : *prepared_plan.shifted(s.shift_mm));
    ScenarioDose out;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
    out.timings = r.timings;
    out.device = engine.options().backend == Backend::kCpu ? -1 : engine.options().gpu_device;
    out.worker = worker;
    out.dose_gy = std::move(r.dose_gy);
    if (r.fractions != 1)
      for (float& v : out.dose_gy.data) v = static_cast<float>(v * r.fractions);
    return out;
  };
  // On the calling thread, in scenario order: the nominal initialises min/max.
  const auto deliver = [&](std::size_t i, const ScenarioDose& d) {
    result.seconds.push_back(d.seconds);
    result.timings.push_back(d.timings);
    result.devices.push_back(d.device);
    result.worker_indices.push_back(d.worker);
    const Volume<float>& dose = d.dose_gy;
    if (i == 0) {
      result.nominal_gy = dose;
      result.min_gy = dose;
      result.max_gy = dose;
    } else {
      if (dose.grid != result.min_gy.grid)
        throw InternalError("robust: scenario '" + scenarios[i].name + "' gave a dose on another grid than the nominal");
      for (std::size_t v = 0; v < dose.data.size(); ++v) {
        result.min_gy.data[v] = std::min(result.min_gy.data[v], dose.data[v]);
        result.max_gy.data[v] = std::max(result.max_gy.data[v], dose.data[v]);
      }
    }
    if (on_scenario) on_scenario(i, dose);
    result.delivered_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };

  // Workers (one or more) each take the next scenario index, compute it and
  // put the dose into the reorder buffer; the calling thread delivers index
  // `delivered` as soon as it is there (min/max, on_scenario: DVHs, the
  // per-scenario RT Dose) while the workers compute the next scenarios, so
  // that work stays off the GPU's critical path even with one worker.
  // `finished`, `delivered` (written by the caller only) and `first_error`
  // are guarded by `mutex`; `stop` is set under it too, so that a worker or
  // the caller waiting on `changed` sees it.
  const std::size_t max_waiting = 2 * static_cast<std::size_t>(workers);
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::size_t, ScenarioDose> finished;
  std::size_t delivered = 0;
  std::exception_ptr first_error;
  std::atomic<std::size_t> next_index{0};
  std::atomic<bool> stop{false};
  const auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!first_error) first_error = e;
    stop = true;
    changed.notify_all();
  };
  const auto work = [&](int worker) {
    try {
      const DoseEngine engine(machine, hu_curve, worker_engine_options(options, worker, workers));
      const std::shared_ptr<const PreparedPlan> prepared_plan = engine.prepare_plan(plan);
      while (!stop) {
        const std::size_t i = next_index.fetch_add(1);
        if (i >= n) break;
        {
          // Not further ahead than max_waiting of the caller. Every index below
          // i is already taken by a worker that is not waiting here, so
          // `delivered` advances (or a failure stops the run).
          std::unique_lock<std::mutex> lock(mutex);
          changed.wait(lock, [&] { return stop || i < delivered + max_waiting; });
        }
        if (stop) break;
        ScenarioDose d = compute_scenario(engine, *prepared_plan, worker, i);
        std::lock_guard<std::mutex> lock(mutex);
        finished.emplace(i, std::move(d));
        changed.notify_all();
      }
    } catch (...) {
      fail(std::current_exception());
    }
  };

  std::vector<std::thread> threads;
  try {
    for (int w = 0; w < workers; ++w) threads.emplace_back(work, w);
    while (delivered < n) {
      ScenarioDose d;
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stop || finished.count(delivered) > 0; });
        if (stop) break;
        auto it = finished.find(delivered);
        d = std::move(it->second);
        finished.erase(it);
      }
      deliver(delivered, d);
      std::lock_guard<std::mutex> lock(mutex);
      ++delivered;
      changed.notify_all();
    }
  } catch (...) {
    // on_scenario, the min/max update or starting a thread failed.
    fail(std::current_exception());
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
    changed.notify_all();
  }
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
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
