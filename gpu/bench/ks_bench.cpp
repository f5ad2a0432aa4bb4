// protondose-ks-bench: the kernel-superposition benchmark.
//
// Reproduces the experiment of da Silva et al. (512 × 512 image of uniform
// random values in [0, 1), σ uniform in [0, r_max/3), r_max = 1 … 32) for every
// implementation, plus batched cases that fill a modern GPU and the uniform-σ
// (true convolution) designs. Times are medians of repeated runs after warm-up,
// measured with CUDA events around device-resident work (no transfers). Every
// GPU result is checked against the CPU oracle (or, for stacks too large for a
// quick CPU run, against the exact GPU gather) and the error is printed.
// A benchmark measures; it asserts nothing about time.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../src/bench_hooks.h"
#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "protondose/gpu/separable_convolution.h"
#include "protondose/gpu/superposition.h"

namespace pd = protondose;
using pd::bench::SuperpositionVariant;

namespace {

struct HostStack {
  pd::StackShape shape;
  std::vector<float> image, sigma_x, sigma_y;
  pd::SuperpositionInput input() const {
    const std::size_t n = shape.pixel_count();
    return {shape, {image.data(), n}, {sigma_x.data(), n}, {sigma_y.data(), n}};
  }
};

HostStack paper_stack(unsigned seed, int slices, int rows, int cols, int r_max) {
  HostStack st{{slices, rows, cols}, {}, {}, {}};
  const std::size_t n = st.shape.pixel_count();
  st.image.resize(n);
  st.sigma_x.resize(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(0.0f, 1.0f);
  std::uniform_real_distribution<float> sigma(0.0f, r_max / 3.0f * 0.9999f);
  for (std::size_t i = 0; i < n; ++i) {
    st.image[i] = value(rng);
    st.sigma_x[i] = sigma(rng);
  }
  st.sigma_y = st.sigma_x;
  return st;
}

// The dose-engine-like stack: σ grows with depth from 0.5 to 6 px (±10 % per pixel).
HostStack depth_stack(unsigned seed, int slices, int side) {
  HostStack st{{slices, side, side}, {}, {}, {}};
  const std::size_t plane = static_cast<std::size_t>(side) * side, n = st.shape.pixel_count();
  st.image.resize(n);
  st.sigma_x.resize(n);
  st.sigma_y.resize(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(0.0f, 1.0f), jitter(0.9f, 1.1f);
  for (int s = 0; s < slices; ++s) {
    const float sigma = 0.5f + 5.5f * s / std::max(1, slices - 1);
    for (std::size_t i = 0; i < plane; ++i) {
      st.image[s * plane + i] = value(rng);
      st.sigma_x[s * plane + i] = std::min(6.0f, sigma * jitter(rng));
      st.sigma_y[s * plane + i] = std::min(6.0f, sigma * jitter(rng));
    }
  }
  return st;
}

struct TapCounts {
  double useful = 0.0;    // Σ (2 rx + 1)(2 ry + 1) over non-zero pixels, each pixel's own radius
  double executed = 0.0;  // tile scatter: Σ over non-zero tiles of 512 · (2 R_tile + 1)²
};

TapCounts count_taps(const HostStack& st, int fixed_radius) {
  TapCounts c;
  const int tile_cols = 32, tile_rows = 16;
  const int tiles_x = (st.shape.cols + tile_cols - 1) / tile_cols, tiles_y = (st.shape.rows + tile_rows - 1) / tile_rows;
  std::vector<int> tile_r(static_cast<std::size_t>(st.shape.slices) * tiles_x * tiles_y, -1);
  for (int s = 0; s < st.shape.slices; ++s)
    for (int y = 0; y < st.shape.rows; ++y)
      for (int x = 0; x < st.shape.cols; ++x) {
        const std::size_t i = (static_cast<std::size_t>(s) * st.shape.rows + y) * st.shape.cols + x;
        if (st.image[i] == 0.0f) continue;
        const int rx = pd::gaussian_radius_px(st.sigma_x[i], 3.0f), ry = pd::gaussian_radius_px(st.sigma_y[i], 3.0f);
        c.useful += (2.0 * rx + 1) * (2.0 * ry + 1);
        int& t = tile_r[(static_cast<std::size_t>(s) * tiles_y + y / tile_rows) * tiles_x + x / tile_cols];
        t = std::max(t, std::max(rx, ry));
      }
  for (int r : tile_r)
    if (r >= 0) {
      const int R = fixed_radius >= 0 ? fixed_radius : r;
      c.executed += tile_cols * tile_rows * (2.0 * R + 1) * (2.0 * R + 1);
    }
  return c;
}

// Products the tensor-core kernel executes (scatter_tensor_core.cu): per tile
// of radius R ≥ min_radius (class RB = ⌈R/8⌉), per source row that reaches a
// warp's 16-row block and per 8-pixel group with a non-zero pixel, one
// 16 × 8 × 8 block product for each of the 2RB + 1 column blocks of the band.
// Counts products (each a three-term TF32 product): the kernel's own
// "executed taps".
double tensor_core_products(const HostStack& st, int min_radius) {
  const int tile_cols = 32, tile_rows = 16;
  const int tiles_x = (st.shape.cols + tile_cols - 1) / tile_cols, tiles_y = (st.shape.rows + tile_rows - 1) / tile_rows;
  double products = 0.0;
  for (int s = 0; s < st.shape.slices; ++s)
    for (int ty = 0; ty < tiles_y; ++ty)
      for (int tx = 0; tx < tiles_x; ++tx) {
        int R = -1;
        std::vector<bool> group_on(tile_rows * 4, false);
        for (int row = 0; row < tile_rows; ++row)
          for (int col = 0; col < tile_cols; ++col) {
            const int x = tx * tile_cols + col, y = ty * tile_rows + row;
            if (x >= st.shape.cols || y >= st.shape.rows) continue;
            const std::size_t i = (static_cast<std::size_t>(s) * st.shape.rows + y) * st.shape.cols + x;
            if (st.image[i] == 0.0f) continue;
            R = std::max(R, std::max(pd::gaussian_radius_px(st.sigma_x[i], 3.0f), pd::gaussian_radius_px(st.sigma_y[i], 3.0f)));
            group_on[row * 4 + col / 8] = true;
          }
        if (R < std::max(1, min_radius) || R > pd::kMaxTileRadiusPx) continue;
        const int rb = (R + 7) / 8;
        for (int warp = 0; warp <= rb; ++warp)
          for (int row = 0; row < tile_rows; ++row) {
            const int e = -8 * rb + 16 * warp - row;
            if (e > R || e + 15 < -R) continue;
            for (int group = 0; group < 4; ++group)
              if (group_on[row * 4 + group]) products += 1024.0 * (2 * rb + 1);
          }
      }
  return products;
}

double relative_error(const std::vector<float>& test, const std::vector<double>& reference) {
  double max_diff = 0.0, max_ref = 0.0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(reference[i]));
    max_diff = std::max(max_diff, std::abs(test[i] - reference[i]));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

class Report {
 public:
  void line(const std::string& text) {
    std::cout << text << "\n" << std::flush;
    text_ << text << "\n";
  }
  std::string str() const { return text_.str(); }

 private:
  std::ostringstream text_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"protondose-ks-bench: kernel-superposition benchmark (da Silva et al.'s experiment and beyond)"};
  std::string out_path;
  int repetitions = 15, warmup = 3, cpu_threads = 0;
  bool quick = false, cpu_only = false, skip_cpu_single = false;
  std::string sections = "ABCD";
  int profile_radius = 0;
  std::vector<int> d_radii, d_fixed_radii;
  bool d_no_fixed = false;
  app.add_option("--out", out_path, "Also write the report (Markdown) to this file");
  app.add_option("--repetitions", repetitions, "Timed runs per case (median reported)")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", warmup, "Untimed warm-up runs per case")->check(CLI::Range(0, 100));
  app.add_option("--cpu-threads", cpu_threads, "Threads of the multi-threaded CPU runs (0 = all)");
  app.add_flag("--quick", quick, "Fewer radii and smaller batches (a smoke run)");
  app.add_flag("--cpu-only", cpu_only, "Time only the CPU oracle (machines without a GPU)");
  app.add_flag("--skip-cpu-single", skip_cpu_single, "Skip the single-thread CPU timings of the 512² sweep");
  app.add_option("--sections", sections,
                 "Which tables to run: any of A (512² sweep), B (batched), C (uniform σ), D (tensor cores)")
      ->capture_default_str();
  app.add_option("--profile-radius", profile_radius,
                 "Only run the fixed-radius kernels (tile scatter, tensor cores) once each at this radius on "
                 "64 × 512², untimed: the launches a profiler looks at")
      ->check(CLI::Range(1, pd::kMaxTileRadiusPx));
  app.add_option("--d-radii", d_radii,
                 "Section D: only these r_max of the batched 64 × 512² cases (comma-separated; the depth stack "
                 "always runs)")
      ->delimiter(',')
      ->check(CLI::Range(1, pd::kMaxTileRadiusPx));
  app.add_option("--d-fixed", d_fixed_radii, "Section D: only these radii of the fixed-radius crossover table")
      ->delimiter(',')
      ->check(CLI::Range(1, pd::kMaxTileRadiusPx));
  app.add_flag("--d-no-fixed", d_no_fixed, "Section D: skip the fixed-radius crossover table");
  CLI11_PARSE(app, argc, argv);

  try {
    Report report;
    const bool gpu = !cpu_only && pd::gpu_device_count() > 0;
    if (!cpu_only && !gpu)
      report.line("No CUDA device (or built without CUDA): timing the CPU oracle only.");
    double ceiling = 0.0;
    if (profile_radius > 0) {
      if (cpu_only) throw pd::ConfigError("--profile-radius " + std::to_string(profile_radius) +
                                          " runs GPU kernels; --cpu-only times the CPU oracle only");
      if (!gpu) throw pd::UnavailableError("--profile-radius " + std::to_string(profile_radius) +
                                           " runs GPU kernels: no CUDA device (or built without CUDA)");
      const HostStack st = paper_stack(6000u + profile_radius, 64, 512, 512, profile_radius);
      for (const SuperpositionVariant v :
           {SuperpositionVariant::kScatterTiledFixedRadius, SuperpositionVariant::kTensorCoreFixedRadius})
        pd::bench::time_superposition(v, st.input(), {}, profile_radius, 0, 1);
      return 0;
    }
    if (gpu) {
      const pd::GpuDeviceInfo info = pd::gpu_device_info(0);
      // Shared-memory ceiling of the tile scatter: one read-modify-write per tap,
      // 32 banks per SM per clock for loads and stores → 16 taps per SM per clock.
      ceiling = info.multiprocessor_count * info.sm_clock_mhz * 1e6 * 16.0;
      report.line("Device: " + info.name + ", " + std::to_string(info.multiprocessor_count) + " SMs at " +
                  fmt("%.0f", info.sm_clock_mhz) + " MHz; shared-memory ceiling " + fmt("%.2e", ceiling) +
                  " taps/s (16 read-modify-writes per SM per clock)");
    }
    report.line("Timing: median of " + std::to_string(repetitions) + " runs after " + std::to_string(warmup) +
                " warm-up runs, CUDA events, device-resident data; CPU threads for multi-threaded runs: " +
                std::to_string(cpu_threads > 0 ? cpu_threads : pd::default_thread_count()));
    report.line("");

    // ---- A: the paper's experiment, 512 × 512.
    std::vector<int> radii;
    for (int r = 1; r <= 32; ++r)
      if (!quick || r == 1 || r == 2 || r == 4 || r == 8 || r == 16 || r == 32) radii.push_back(r);
    report.line("### A. 512 × 512, image U[0,1), σ U[0, r_max/3) (da Silva et al.'s experiment)");
    report.line("");
    if (gpu) {
      report.line("| r_max | gather exact (ms) | scatter atomic (ms) | scatter tiled, host-launched buckets (ms) | tiled, device-launched buckets (ms) | tiled, fixed r (ms) | "
                  "tiled deterministic (ms) | tiled vs gather | fixed-r vs gather | deterministic / default | CPU 1 thread (ms) | "
                  "CPU / tiled | fixed-r taps/s | % of ceiling | max rel. error vs CPU (gather, atomic, tiled, det.) | "
                  "register-blocked (ms) | reg.-blocked fixed r (ms) | reg.-blocked fixed-r taps/s | reg.-blocked vs tiled | "
                  "max rel. error reg.-blocked vs CPU |");
      report.line("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    } else {
      report.line("| r_max | CPU 1 thread (ms) | CPU " + std::to_string(pd::default_thread_count()) + " threads (ms) | taps/s (multi-thread) |");
      report.line("|---|---|---|---|");
    }
    for (int r_max : radii) {
      if (sections.find('A') == std::string::npos) break;
      const HostStack st = paper_stack(1000u + r_max, 1, 512, 512, r_max);
      double cpu_single_ms = NAN;
      pd::SuperpositionOptions single;
      single.cpu_threads = 1;
      std::vector<double> reference;
      if (!skip_cpu_single || !gpu) {
        const auto t0 = std::chrono::steady_clock::now();
        reference = pd::superpose_cpu_reference(st.input(), single);
        cpu_single_ms = 1e3 * seconds_since(t0);
      }
      if (!gpu) {
        pd::SuperpositionOptions multi;
        multi.cpu_threads = cpu_threads;
        const auto t0 = std::chrono::steady_clock::now();
        pd::superpose_cpu_reference(st.input(), multi);
        const double ms = 1e3 * seconds_since(t0);
        const TapCounts taps = count_taps(st, -1);
        report.line("| " + std::to_string(r_max) + " | " + fmt("%.1f", cpu_single_ms) + " | " + fmt("%.1f", ms) + " | " +
                    fmt("%.2e", taps.useful / (ms * 1e-3)) + " |");
        continue;
      }
      if (reference.empty()) reference = pd::superpose_cpu_reference(st.input());
      const pd::SuperpositionOptions options;
      const auto gather = pd::bench::time_superposition(SuperpositionVariant::kGatherExact, st.input(), options, 0, warmup, repetitions);
      const auto atomic = pd::bench::time_superposition(SuperpositionVariant::kScatterAtomic, st.input(), options, 0, warmup, repetitions);
      const auto tiled = pd::bench::time_superposition(SuperpositionVariant::kScatterTiled, st.input(), options, 0, warmup, repetitions);
      const auto device_launched = pd::bench::time_superposition(SuperpositionVariant::kScatterTiledDeviceLaunch, st.input(), options, 0, warmup, repetitions);
      const auto fixed = pd::bench::time_superposition(SuperpositionVariant::kScatterTiledFixedRadius, st.input(), options, r_max, warmup, repetitions);
      const auto det = pd::bench::time_superposition(SuperpositionVariant::kScatterTiledDeterministic, st.input(), options, 0, warmup, repetitions);
      const auto blocked = pd::bench::time_superposition(SuperpositionVariant::kRegisterBlocked, st.input(), options, 0, warmup, repetitions);
      const auto blocked_fixed = pd::bench::time_superposition(SuperpositionVariant::kRegisterBlockedFixedRadius, st.input(), options, r_max, warmup, repetitions);
      const TapCounts fixed_taps = count_taps(st, r_max);
      const double fixed_rate = fixed_taps.executed / (fixed.median_ms * 1e-3);
      report.line("| " + std::to_string(r_max) + " | " + fmt("%.4f", gather.median_ms) + " | " + fmt("%.4f", atomic.median_ms) +
                  " | " + fmt("%.4f", tiled.median_ms) + " | " + fmt("%.4f", device_launched.median_ms) + " | " + fmt("%.4f", fixed.median_ms) + " | " +
                  fmt("%.4f", det.median_ms) + " | " + fmt("%.2f", gather.median_ms / tiled.median_ms) + " | " +
                  fmt("%.2f", gather.median_ms / fixed.median_ms) + " | " + fmt("%.2f", det.median_ms / tiled.median_ms) +
                  " | " + fmt("%.1f", cpu_single_ms) + " | " + fmt("%.0f", cpu_single_ms / tiled.median_ms) + " | " +
                  fmt("%.2e", fixed_rate) + " | " + fmt("%.0f", 100.0 * fixed_rate / ceiling) + " | " +
                  fmt("%.1e", relative_error(gather.output, reference)) + ", " +
                  fmt("%.1e", relative_error(atomic.output, reference)) + ", " +
                  fmt("%.1e", relative_error(tiled.output, reference)) + ", " +
                  fmt("%.1e", relative_error(det.output, reference)) + " | " + fmt("%.4f", blocked.median_ms) + " | " +
                  fmt("%.4f", blocked_fixed.median_ms) + " | " + fmt("%.2e", fixed_taps.executed / (blocked_fixed.median_ms * 1e-3)) +
                  " | " + fmt("%.2f", tiled.median_ms / blocked.median_ms) + " | " +
                  fmt("%.1e", std::max(relative_error(blocked.output, reference), relative_error(blocked_fixed.output, reference))) + " |");
    }
    report.line("");
    if (!gpu) {
      if (!out_path.empty()) pd::write_text_atomically(out_path, report.str());
      return 0;
    }

    // ---- B: batched stacks that fill the GPU.
    report.line("### B. Batched stacks (accuracy: tiled vs exact GPU gather; CPU oracle where stated)");
    report.line("");
    report.line("| case | gather exact (ms) | scatter atomic (ms) | scatter tiled, host-launched buckets (ms) | tiled, device-launched (ms) | tiled deterministic (ms) | tiled vs gather | "
                "det. / default | useful taps/s | executed taps/s | % of ceiling (executed) | max rel. error tiled vs gather | "
                "CPU " + std::to_string(cpu_threads > 0 ? cpu_threads : pd::default_thread_count()) + " threads (ms) | "
                "register-blocked (ms) | reg.-blocked useful taps/s | reg.-blocked executed taps/s | reg.-blocked vs tiled | max rel. error reg.-blocked vs gather |");
    report.line("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    std::vector<std::pair<std::string, HostStack>> cases;
    if (sections.find('B') != std::string::npos) {
    for (int r_max : quick ? std::vector<int>{4, 8, 16} : std::vector<int>{1, 2, 4, 8, 16, 32})
      cases.emplace_back(std::to_string(quick ? 8 : 64) + " × 512², r_max " + std::to_string(r_max),
                         paper_stack(2000u + r_max, quick ? 8 : 64, 512, 512, r_max));
    cases.emplace_back("200 × 192², σ 0.5→6 px with depth", depth_stack(3000u, 200, 192));
    }
    for (const auto& [name, st] : cases) {
      const pd::SuperpositionOptions options;
      const auto gather = pd::bench::time_superposition(SuperpositionVariant::kGatherExact, st.input(), options, 0, 1, std::max(3, repetitions / 3));
      const auto atomic = pd::bench::time_superposition(SuperpositionVariant::kScatterAtomic, st.input(), options, 0, 1, std::max(3, repetitions / 3));
      const auto tiled = pd::bench::time_superposition(SuperpositionVariant::kScatterTiled, st.input(), options, 0, warmup, repetitions);
      const auto device_launched = pd::bench::time_superposition(SuperpositionVariant::kScatterTiledDeviceLaunch, st.input(), options, 0, warmup, repetitions);
      const auto det = pd::bench::time_superposition(SuperpositionVariant::kScatterTiledDeterministic, st.input(), options, 0, warmup, repetitions);
      const auto blocked = pd::bench::time_superposition(SuperpositionVariant::kRegisterBlocked, st.input(), options, 0, warmup, repetitions);
      const TapCounts taps = count_taps(st, -1);
      std::string cpu_ms = "—";
      if (name.rfind("200", 0) == 0) {  // the no-GPU path on the dose-engine-like stack
        pd::SuperpositionOptions multi;
        multi.cpu_threads = cpu_threads;
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<double> reference = pd::superpose_cpu_reference(st.input(), multi);
        cpu_ms = fmt("%.0f", 1e3 * seconds_since(t0)) + " (tiled vs CPU error " + fmt("%.1e", relative_error(tiled.output, reference)) + ")";
      }
      report.line("| " + name + " | " + fmt("%.3f", gather.median_ms) + " | " + fmt("%.3f", atomic.median_ms) + " | " +
                  fmt("%.3f", tiled.median_ms) + " | " + fmt("%.3f", device_launched.median_ms) + " | " + fmt("%.3f", det.median_ms) + " | " +
                  fmt("%.2f", gather.median_ms / tiled.median_ms) + " | " + fmt("%.2f", det.median_ms / tiled.median_ms) + " | " +
                  fmt("%.2e", taps.useful / (tiled.median_ms * 1e-3)) + " | " + fmt("%.2e", taps.executed / (tiled.median_ms * 1e-3)) +
                  " | " + fmt("%.0f", 100.0 * taps.executed / (tiled.median_ms * 1e-3) / ceiling) + " | " +
                  fmt("%.1e", relative_error(tiled.output, to_double(gather.output))) + " | " + cpu_ms + " | " +
                  fmt("%.3f", blocked.median_ms) + " | " + fmt("%.2e", taps.useful / (blocked.median_ms * 1e-3)) + " | " +
                  fmt("%.2e", taps.executed / (blocked.median_ms * 1e-3)) + " | " + fmt("%.2f", tiled.median_ms / blocked.median_ms) +
                  " | " + fmt("%.1e", relative_error(blocked.output, to_double(gather.output))) + " |");
    }
    report.line("");

    // ---- C: uniform σ — a true convolution.
    report.line(std::string("### C. Uniform σ (true convolution): ") + (quick ? "4" : "64") +
                " × 512², σ = (r − ½)/3 so that the radius is r");
    report.line("");
    report.line("| r | separable (ms) | direct, global (ms) | direct, constant (ms) | direct, shared tile (ms) | KS scatter tiled (ms) | "
                "KS with uniform slices split off (ms) | fastest exact | max rel. error vs CPU separable (sep., global, const., shared, KS, KS split) |");
    report.line("|---|---|---|---|---|---|---|---|---|");
    for (int r : quick ? std::vector<int>{2, 8} : std::vector<int>{1, 2, 4, 8, 16, 32}) {
      if (sections.find('C') == std::string::npos) break;
      const int slices = quick ? 4 : 64;
      HostStack st = paper_stack(4000u + r, slices, 512, 512, 1);
      const float sigma = (r - 0.5f) / 3.0f;
      std::fill(st.sigma_x.begin(), st.sigma_x.end(), sigma);
      std::fill(st.sigma_y.begin(), st.sigma_y.end(), sigma);
      const std::vector<float> per_slice(slices, sigma);
      const pd::UniformSigmaInput uniform{st.shape, st.input().image, {per_slice.data(), per_slice.size()},
                                          {per_slice.data(), per_slice.size()}};
      const std::vector<double> reference = pd::convolve_separable_cpu(uniform);
      pd::SuperpositionOptions options;
      options.separable_uniform_slices = false;  // the scatter itself; the split is timed separately
      pd::SuperpositionOptions split_options;
      split_options.separable_uniform_slices = true;
      const auto sep = pd::bench::time_convolution(pd::ConvolutionMethod::kGpuSeparable, uniform, options, warmup, repetitions);
      const auto glob = pd::bench::time_convolution(pd::ConvolutionMethod::kGpuDirectGlobal, uniform, options, 1, std::max(3, repetitions / 3));
      const auto cons = pd::bench::time_convolution(pd::ConvolutionMethod::kGpuDirectConstant, uniform, options, 1, std::max(3, repetitions / 3));
      const auto shar = pd::bench::time_convolution(pd::ConvolutionMethod::kGpuDirectSharedTile, uniform, options, 1, std::max(3, repetitions / 3));
      const auto ks = pd::bench::time_superposition(SuperpositionVariant::kScatterTiled, st.input(), options, 0, warmup, repetitions);
      const auto ks_split = pd::bench::time_superposition(SuperpositionVariant::kScatterTiled, st.input(), split_options, 0, warmup, repetitions);
      const std::pair<double, const char*> all[] = {{sep.median_ms, "separable"}, {glob.median_ms, "direct global"},
                                                    {cons.median_ms, "direct constant"}, {shar.median_ms, "direct shared"},
                                                    {ks.median_ms, "KS scatter"}, {ks_split.median_ms, "KS split"}};
      const auto best = *std::min_element(std::begin(all), std::end(all));
      report.line("| " + std::to_string(r) + " | " + fmt("%.3f", sep.median_ms) + " | " + fmt("%.3f", glob.median_ms) + " | " +
                  fmt("%.3f", cons.median_ms) + " | " + fmt("%.3f", shar.median_ms) + " | " + fmt("%.3f", ks.median_ms) + " | " +
                  fmt("%.3f", ks_split.median_ms) + " | " + best.second + " | " + fmt("%.1e", relative_error(sep.output, reference)) + ", " +
                  fmt("%.1e", relative_error(glob.output, reference)) + ", " + fmt("%.1e", relative_error(cons.output, reference)) +
                  ", " + fmt("%.1e", relative_error(shar.output, reference)) + ", " + fmt("%.1e", relative_error(ks.output, reference)) +
                  ", " + fmt("%.1e", relative_error(ks_split.output, reference)) + " |");
    }
    report.line("");
    // ---- D: the tensor-core scatter against the paper's design, batched.
    if (sections.find('D') != std::string::npos) {
      report.line("### D. Tensor-core scatter (3×TF32 mma.sync) vs the paper's tile scatter, batched; accuracy vs the exact GPU gather");
      report.line("");
      report.line("Taps/s three ways: useful = Σ(2rx+1)(2ry+1) over non-zero pixels; paper-executed = the tile "
                  "scatter's own count, 512·(2R_tile+1)² per non-zero tile (the issue's executed taps); "
                  "tensor-core products = the 16×8×8 block products the tensor-core kernel executes (all radii on the tensor cores).");
      report.line("");
      report.line("| case | tiled (ms) | tensor cores, all radii (ms) | tensor cores, crossover " +
                  std::to_string(pd::kTensorCoreMinRadiusPx) + " px (ms) | tensor cores deterministic (ms) | "
                  "speed-up vs tiled (all radii) | useful taps/s | paper-executed taps/s | tensor-core products/s | "
                  "products / useful | max rel. error vs gather (all, crossover, det.) |");
      report.line("|---|---|---|---|---|---|---|---|---|---|---|");
      std::vector<std::pair<std::string, HostStack>> d_cases;
      const std::vector<int> r_max_list = !d_radii.empty() ? d_radii
                                          : quick          ? std::vector<int>{4, 8, 16}
                                                           : std::vector<int>{2, 4, 6, 8, 12, 16, 24, 32};
      for (int r_max : r_max_list)
        d_cases.emplace_back(std::to_string(quick ? 8 : 64) + " × 512², r_max " + std::to_string(r_max),
                             paper_stack(2000u + r_max, quick ? 8 : 64, 512, 512, r_max));
      d_cases.emplace_back("200 × 192², σ 0.5→6 px with depth", depth_stack(3000u, 200, 192));
      for (const auto& [name, st] : d_cases) {
        pd::SuperpositionOptions all_radii;
        all_radii.tensor_core_min_radius_px = 1;
        const pd::SuperpositionOptions defaults;
        const auto gather = pd::bench::time_superposition(SuperpositionVariant::kGatherExact, st.input(), defaults, 0, 0, 1);
        const auto tiled = pd::bench::time_superposition(SuperpositionVariant::kScatterTiled, st.input(), defaults, 0, warmup, repetitions);
        const auto tc = pd::bench::time_superposition(SuperpositionVariant::kTensorCore, st.input(), all_radii, 0, warmup, repetitions);
        const auto tc_default = pd::bench::time_superposition(SuperpositionVariant::kTensorCore, st.input(), defaults, 0, warmup, repetitions);
        const auto tc_det = pd::bench::time_superposition(SuperpositionVariant::kTensorCoreDeterministic, st.input(), all_radii, 0, warmup, repetitions);
        const TapCounts taps = count_taps(st, -1);
        const double products = tensor_core_products(st, 1);
        const std::vector<double> reference = to_double(gather.output);
        report.line("| " + name + " | " + fmt("%.3f", tiled.median_ms) + " | " + fmt("%.3f", tc.median_ms) + " | " +
                    fmt("%.3f", tc_default.median_ms) + " | " + fmt("%.3f", tc_det.median_ms) + " | " +
                    fmt("%.2f", tiled.median_ms / tc.median_ms) + " | " + fmt("%.2e", taps.useful / (tc.median_ms * 1e-3)) +
                    " | " + fmt("%.2e", taps.executed / (tc.median_ms * 1e-3)) + " | " +
                    fmt("%.2e", products / (tc.median_ms * 1e-3)) + " | " + fmt("%.2f", products / taps.useful) + " | " +
                    fmt("%.1e", relative_error(tc.output, reference)) + ", " +
                    fmt("%.1e", relative_error(tc_default.output, reference)) + ", " +
                    fmt("%.1e", relative_error(tc_det.output, reference)) + " |");
      }
      report.line("");
      // The crossover: one 512² image per fixed radius, every tile at r (the paper's experiment).
      const std::vector<int> fixed_list = d_no_fixed              ? std::vector<int>{}
                                          : !d_fixed_radii.empty() ? d_fixed_radii
                                          : quick ? std::vector<int>{2, 4, 8}
                                                  : std::vector<int>{1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32};
      if (!fixed_list.empty()) {
        report.line("Crossover, 512² (64 slices), every tile at fixed r: tile scatter vs tensor cores");
        report.line("");
        report.line("| r | tiled fixed r (ms) | tensor cores fixed r, fresh row sums (ms) | chained accumulation (ms) | "
                    "tensor cores / tiled | paper-executed taps/s (fresh, chained) | useful taps/s (fresh) | "
                    "max rel. error vs gather (tiled, fresh, chained) |");
        report.line("|---|---|---|---|---|---|---|---|");
        for (int r : fixed_list) {
          const HostStack st = paper_stack(6000u + r, quick ? 8 : 64, 512, 512, r);
          const pd::SuperpositionOptions defaults;
          const auto tiled = pd::bench::time_superposition(SuperpositionVariant::kScatterTiledFixedRadius, st.input(), defaults, r, warmup, repetitions);
          const auto tc = pd::bench::time_superposition(SuperpositionVariant::kTensorCoreFixedRadius, st.input(), defaults, r, warmup, repetitions);
          const auto chained = pd::bench::time_superposition(SuperpositionVariant::kTensorCoreFixedRadiusChained, st.input(), defaults, r, warmup, repetitions);
          const auto gather = pd::bench::time_superposition(SuperpositionVariant::kGatherExact, st.input(), defaults, 0, 0, 1);
          const std::vector<double> reference = to_double(gather.output);
          const TapCounts taps = count_taps(st, r);
          report.line("| " + std::to_string(r) + " | " + fmt("%.3f", tiled.median_ms) + " | " + fmt("%.3f", tc.median_ms) +
                      " | " + fmt("%.3f", chained.median_ms) + " | " + fmt("%.2f", tc.median_ms / tiled.median_ms) + " | " +
                      fmt("%.2e", taps.executed / (tc.median_ms * 1e-3)) + ", " +
                      fmt("%.2e", taps.executed / (chained.median_ms * 1e-3)) + " | " +
                      fmt("%.2e", taps.useful / (tc.median_ms * 1e-3)) + " | " +
                      fmt("%.1e", relative_error(tiled.output, reference)) + ", " +
                      fmt("%.1e", relative_error(tc.output, reference)) + ", " +
                      fmt("%.1e", relative_error(chained.output, reference)) + " |");
        }
        report.line("");
      }
    }
    if (!out_path.empty()) pd::write_text_atomically(out_path, report.str());
    return 0;
  } catch (const pd::Error& e) {
    std::cerr << "protondose-ks-bench: [" << pd::category_name(e.category()) << "] " << e.what() << "\n";
    return pd::exit_code(e.category());
  }
}
