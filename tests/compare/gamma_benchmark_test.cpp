// Timing of gamma_3d on a 256³ grid (docs/benchmarks-compare.md, "Gamma").
// Disabled in the normal suite (timings do not belong in pass/fail tests); run
//   test_compare --gtest_also_run_disabled_tests --gtest_filter='GammaBenchmark.*'
// The dose is the water_dcpt Monte Carlo reference resampled onto a 256³ grid
// of 1 mm voxels; the evaluated dose is the same dose shifted 1 mm along +y
// (the beam direction) and scaled by 1.02 — a small field (5 % of the grid
// above the threshold). A second case fills a large part of the grid: an
// analytic 160 mm box field with a depth gradient and erf penumbrae, against
// the same field shifted by (0.7, 0.7, 0.7) mm and scaled by 1.02.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <vector>

#include "protondose/compare/gamma.h"
#include "protondose/compare/resample.h"
#include "protondose/core/metaimage.h"
#include "protondose/core/parallel.h"

namespace protondose::compare {
namespace {

void time_gamma(const Volume<float>& ref, const Volume<float>& eval, const std::string& label) {
  const int repeats = std::getenv("GAMMA_BENCH_REPEATS") ? std::atoi(std::getenv("GAMMA_BENCH_REPEATS")) : 5;
  // GAMMA_BENCH_ONLY=2 runs only 2 %/2 mm (likewise 3 or 1).
  const double only = std::getenv("GAMMA_BENCH_ONLY") ? std::atof(std::getenv("GAMMA_BENCH_ONLY")) : 0.0;
  for (const auto& [dd, dta] : std::vector<std::pair<double, double>>{{2.0, 2.0}, {3.0, 3.0}, {1.0, 1.0}}) {
    if (only > 0.0 && only != dd) continue;
    GammaOptions o;
    o.dose_criterion_percent = dd;
    o.distance_mm = dta;
    o.threshold_percent = 10.0;
    std::vector<double> seconds, cpu_seconds;
    GammaResult r;
    for (int n = 0; n < repeats; ++n) {
      // Wall time, and the process's CPU time over all threads: on a shared
      // machine the wall time depends on the load, the CPU time much less.
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      r = gamma_3d(ref, eval, o);
      cpu_seconds.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    std::sort(cpu_seconds.begin(), cpu_seconds.end());
    std::cout << label << ": gamma " << dd << "%/" << dta << "mm global, 10% threshold, 256^3 at 1 mm, "
              << default_thread_count() << " threads: median " << seconds[seconds.size() / 2]
              << " s (min " << seconds.front() << ", max " << seconds.back() << ", " << repeats
              << " repeats), CPU time median " << cpu_seconds[cpu_seconds.size() / 2]
              << " s; evaluated " << r.evaluated_voxels << " voxels, pass rate "
              << r.pass_rate_percent << " %, mean " << r.mean_gamma << ", p95 " << r.p95_gamma
              << ", max " << r.max_gamma << std::endl;
    EXPECT_GT(r.evaluated_voxels, 100000u);
  }
}

Grid3 bench_grid() {
  Grid3 g;
  g.size = {256, 256, 256};
  g.spacing_mm = {1.0, 1.0, 1.0};
  g.origin_mm = {-127.5, -107.5, -127.5};  // covers the water_dcpt box (y from −100 to 150)
  return g;
}

TEST(GammaBenchmark, DISABLED_AnalyticBoxFieldOn256CubedGrid) {
  const Grid3 g = bench_grid();
  // Flat 160 mm field laterally (x, z), dose rising linearly with depth y over
  // 160 mm; erf edges with σ = 4 mm.
  auto field = [](double x, double y, double z) {
    auto edge = [](double u) { return 0.5 * (std::erf((80.0 - u) / (4.0 * std::sqrt(2.0))) +
                                              std::erf((80.0 + u) / (4.0 * std::sqrt(2.0)))); };
    return (1.0 + 0.004 * y) * edge(x) * edge(z) * edge(y - 10.0);
  };
  Volume<float> ref(g), eval(g);
  for (int k = 0; k < 256; ++k)
    for (int j = 0; j < 256; ++j)
      for (int i = 0; i < 256; ++i) {
        const Vec3 p = g.position_mm(i, j, k);
        ref.at(i, j, k) = static_cast<float>(field(p[0], p[1], p[2]));
        eval.at(i, j, k) = static_cast<float>(1.02 * field(p[0] - 0.7, p[1] - 0.7, p[2] - 0.7));
      }
  time_gamma(ref, eval, "analytic box field");
}

TEST(GammaBenchmark, DISABLED_MonteCarloDoseOn256CubedGrid) {
  // GAMMA_BENCH_DOSE overrides the path (for a machine without the shared folder).
  const char* override_path = std::getenv("GAMMA_BENCH_DOSE");
  const std::string path = override_path ? std::string(override_path)
                                         : std::string(PROTONDOSE_SHARED_DIR) + "/reference/water_dcpt/mc_dose.mhd";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared reference not present: " << path;
  const Volume<float> mc = read_metaimage(path);
  const Grid3 g = bench_grid();
  const Volume<float> ref = resample_trilinear(mc, g);
  Grid3 shifted = mc.grid;
  shifted.origin_mm[1] += 1.0;
  Volume<float> moved = mc;
  moved.grid = shifted;
  for (float& d : moved.data) d *= 1.02f;
  const Volume<float> eval = resample_trilinear(moved, g);

  time_gamma(ref, eval, "water_dcpt MC dose");
}

}  // namespace
}  // namespace protondose::compare
