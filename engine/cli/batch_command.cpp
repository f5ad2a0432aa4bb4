// `protondose batch MANIFEST [...]`: many dose recomputations in one warm
// process, resumable, shardable over a Slurm job array (docs/batch.md,
// docs/slurm.md, docs/formats/batch-manifest.md).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command_registry.h"
#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/batch_dicom_io.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/gpu/device_superposition.h"

namespace {

namespace pe = protondose::engine;
namespace fs = std::filesystem;

struct BatchArgs {
  std::string manifest;
  std::string report_dir;
  std::string backend;
  int workers = 1;
  bool workers_given = false;  // --workers on the command line (contradicts --gpus)
  std::string gpus;
  int workers_per_gpu = 1;
  int threads = 0;
  int writers = 0;  // 0: 4 per GPU worker, else 2 (see below)
  double ct_cache_mb = 4096;
  bool force = false;
  std::string shard;
  bool merge = false;
  bool slurm_script = false;
  int gpus_per_task = 0;
  int array_size = 4;
  std::vector<std::string> flags;
  std::string gamma = "3/3";
  double ray_pitch_mm = 1.0;
  double depth_step_mm = 1.0;
  bool verbose = false;
};

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

/// First SIGINT/SIGTERM: finish the jobs in flight, start no more. A second one
/// kills (SA_RESETHAND): outputs are atomic either way.
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string shard_suffix(const pe::ShardSpec& s) {
  return s.count > 1 ? ".shard-" + std::to_string(s.index) + "-of-" + std::to_string(s.count) : "";
}

protondose::compare::GammaOptions parse_gamma(const std::string& text) {
  protondose::compare::GammaOptions g;
  const auto slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    g.dose_criterion_percent = std::stod(text.substr(0, slash));
    g.distance_mm = std::stod(text.substr(slash + 1));
  } catch (const std::exception&) {
    throw protondose::ConfigError("--gamma '" + text + "': expected DOSE_PERCENT/DISTANCE_MM, e.g. 3/3");
  }
  g.validate();
  return g;
}

std::string self_executable() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("protondose") : p.string();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void write_reports(const pe::BatchSummary& s, const std::string& dir, const std::string& suffix, bool quiet) {
  const std::string table = pe::format_summary_table(s);
  protondose::write_text_atomically((fs::path(dir) / ("summary" + suffix + ".json")).string(),
                                    pe::to_json(s).dump(2) + "\n");
  protondose::write_text_atomically((fs::path(dir) / ("summary" + suffix + ".txt")).string(), table);
  if (!quiet) std::cout << table << std::flush;
}

void run_batch_command(const BatchArgs& a, protondose::cli::CliContext& ctx) {
  // The engine's per-beam log lines would bury the progress bar and the table.
  spdlog::set_level(a.verbose ? spdlog::level::info : spdlog::level::warn);
  const pe::Manifest manifest = pe::load_manifest(a.manifest);
  const std::string report_dir = a.report_dir.empty() ? manifest.folder : a.report_dir;
  if (!fs::is_directory(report_dir)) fs::create_directories(report_dir);

  if (a.slurm_script) {
    // Each array task places its workers as this command would: on the GPUs
    // (--gpus, --workers-per-gpu) or as CPU workers (--workers), never both.
    std::string extra = a.gpus.empty() ? "--workers " + std::to_string(a.workers)
                                       : "--gpus " + shell_quote(a.gpus) + " --workers-per-gpu " +
                                             std::to_string(a.workers_per_gpu);
    if (!a.backend.empty()) extra += " --backend " + shell_quote(a.backend);
    if (a.force) extra += " --force";
    if (a.threads > 0) extra += " --threads " + std::to_string(a.threads);
    for (const auto& f : a.flags) extra += " --flag " + shell_quote(f);
    char geometry[96];
    std::snprintf(geometry, sizeof geometry, " --ray-pitch %.17g --depth-step %.17g --gamma %s", a.ray_pitch_mm,
                  a.depth_step_mm, a.gamma.c_str());
    extra += geometry;
    std::cout << pe::slurm_array_script(self_executable(), fs::absolute(a.manifest).string(), a.array_size,
                                        a.gpus_per_task, fs::absolute(report_dir).string(), extra);
    return;
  }

  if (a.merge) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(report_dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("records", 0) == 0 && e.path().extension() == ".jsonl") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw protondose::InputError(report_dir + ": no records*.jsonl to merge");
    const pe::BatchSummary s = pe::merge_records(manifest, files);
    write_reports(s, report_dir, "", ctx.quiet);
    if (!s.all_succeeded()) ctx.exit_code = 1;
    return;
  }

  pe::BatchOptions o;
  o.version = PROTONDOSE_VERSION;
  o.force = a.force;
  o.ray_pitch_mm = a.ray_pitch_mm;
  o.depth_step_mm = a.depth_step_mm;
  o.threads_per_worker = a.threads;
  if (!(a.ct_cache_mb > 0)) throw protondose::ConfigError("--ct-cache-mb must be > 0");
  o.ct_cache_bytes = static_cast<std::size_t>(a.ct_cache_mb * 1024.0 * 1024.0);
  if (!a.shard.empty()) o.shard = pe::parse_shard(a.shard);
  for (const auto& f : a.flags) o.flags.push_back(pe::parse_flag_rule(f));
  const protondose::compare::GammaOptions gamma = parse_gamma(a.gamma);
  if (!a.gpus.empty()) {
    // Before the device lookup, so that the contradiction is named on a
    // machine without a GPU too (robust does the same).
    if (a.backend == "cpu")
      throw protondose::ConfigError("--gpus " + a.gpus +
                                    " with --backend cpu: the cpu backend runs on no GPU; use --workers for CPU workers");
    if (a.workers_given)
      throw protondose::ConfigError("--workers with --gpus: GPU workers are placed by --gpus and --workers-per-gpu");
    const std::vector<int> devices = pe::parse_gpu_list(a.gpus, protondose::gpu_device_count());
    o.gpu_devices = devices;  // worker w on devices[w mod n]: every listed GPU gets workers
    if (a.workers_per_gpu < 1) throw protondose::ConfigError("--workers-per-gpu must be >= 1");
    o.workers = static_cast<int>(devices.size()) * a.workers_per_gpu;
    o.default_backend = a.backend.empty() ? "gpu" : a.backend;
  } else {
    o.workers = a.workers;
    o.default_backend = a.backend.empty() ? "cpu" : a.backend;
  }
  // One warm GPU worker computes a plan03-sized job in ~30 ms and one RT Dose
  // write (encoding, fsync, checksum) takes ~45 ms: on two H200s 2 writers per
  // GPU left the workers waiting on a full write queue, 4 did not
  // (docs/benchmarks-batch.md). CPU workers are seconds per job: 2 writers.
  if (a.writers < 0) throw protondose::ConfigError("--writers " + std::to_string(a.writers) + ": need at least 1");
  o.writers = a.writers > 0 ? a.writers : (o.gpu_devices.empty() ? 2 : 4 * o.workers);
  o.records_path = (fs::path(report_dir) / ("records" + shard_suffix(o.shard) + ".jsonl")).string();
  const bool progress = !ctx.quiet && ::isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  o.on_record = [progress, t0](const pe::JobRecord& r, std::size_t done, std::size_t total) {
    if (r.status == "failed") spdlog::warn("job '{}' failed ({}): {}", r.id, r.category, r.message);
    if (!progress) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0.0;
    const int width = 30;
    const int filled = total ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu  ETA %.0f s  %-24.24s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total, eta, r.id.c_str());
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  g_stop = false;
  o.stop = &g_stop;
  install_stop_handlers();
  const pe::BatchSummary s = pe::run_batch(manifest, o, pe::dicom_io::make_batch_io(gamma));
  write_reports(s, report_dir, shard_suffix(o.shard), ctx.quiet);
  if (!s.all_succeeded()) ctx.exit_code = 1;
}

void add_batch(CLI::App& app, protondose::cli::CliContext& ctx) {
  auto a = std::make_shared<BatchArgs>();
  CLI::App* cmd = app.add_subcommand("batch", "Recompute many plans/CTs/scenarios from a manifest (JSON or CSV)");
  cmd->add_option("manifest", a->manifest, "Manifest (.json or .csv; docs/formats/batch-manifest.md)")->required();
  cmd->add_option("--report-dir", a->report_dir, "Folder for records*.jsonl and summary (default: the manifest's)");
  cmd->add_option("--backend", a->backend, "Default backend of jobs naming none: cpu | gpu | gpu-gather");
  cmd->add_option("--workers", a->workers, "Compute workers on the CPU backend")
      ->capture_default_str()
      ->each([a](const std::string&) { a->workers_given = true; });
  cmd->add_option("--gpus", a->gpus, "GPU workers: all | 0,1 | 0 (device indices)");
  cmd->add_option("--workers-per-gpu", a->workers_per_gpu, "Workers sharing each GPU")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Engine threads per worker (default: cores / workers)");
  cmd->add_option("--writers", a->writers,
                  "Threads writing RT Dose files, comparisons and records (default: 4 per GPU worker, else 2)");
  cmd->add_option("--ct-cache-mb", a->ct_cache_mb, "Memory budget of the CT cache (MiB)")->capture_default_str();
  cmd->add_flag("--force", a->force, "Recompute jobs whose outputs are up to date");
  cmd->add_option("--shard", a->shard, "Run only shard K/N (jobs whose id hash is K mod N)");
  cmd->add_flag("--merge", a->merge, "Merge the shards' records in the report folder into one summary");
  cmd->add_flag("--slurm-script", a->slurm_script, "Print an sbatch job-array script running the shards");
  cmd->add_option("--gpus-per-task", a->gpus_per_task, "GPUs per array task in --slurm-script")->capture_default_str();
  cmd->add_option("--array-size", a->array_size, "Array tasks (shards) in --slurm-script")->capture_default_str();
  cmd->add_option("--flag", a->flags, "Mark jobs for review, e.g. 'PTV:D95<-3%', 'gamma<95' (repeatable)");
  cmd->add_option("--gamma", a->gamma, "Gamma criteria DOSE_PERCENT/DISTANCE_MM vs reference_dose")->capture_default_str();
  cmd->add_option("--ray-pitch", a->ray_pitch_mm, "BEV ray spacing at the isocentre plane (mm)")->capture_default_str();
  cmd->add_option("--depth-step", a->depth_step_mm, "BEV slice thickness (mm)")->capture_default_str();
  cmd->add_flag("--verbose", a->verbose, "Log the engine's per-beam lines");
  cmd->callback([a, &ctx]() { run_batch_command(*a, ctx); });
}

const protondose::cli::CommandRegistration kBatchRegistration{"batch", &add_batch};

}  // namespace
