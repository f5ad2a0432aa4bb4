#pragma once
/// \file batch.h
/// `protondose batch`: many dose recomputations in one warm process
/// (docs/batch.md). A reader thread loads CTs (through a CT cache with a memory
/// budget) and plans, compute workers each keep their engines warm (machine
/// data, depth-dose cache, superposer), a writer thread writes RT Dose,
/// compares with the reference and appends one JSON-lines record per job.
/// A failing job is recorded and the batch goes on; outputs carry a sidecar
/// record so that a re-run skips what is already done.
///
/// DICOM and the comparison module are reached through BatchIo hooks (the
/// engine library does not link them); batch_dicom_io.h provides them.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protondose/core/plan.h"
#include "protondose/core/rigid_transform.h"
#include "protondose/engine/manifest.h"
#include "protondose/physics/hu_curve.h"

namespace protondose::engine {

// ---- checksums ---------------------------------------------------------

inline constexpr std::uint64_t kFnv64Offset = 14695981039346656037ull;
/// 64-bit FNV-1a of `size` bytes, continuing from `state` (Fowler–Noll–Vo,
/// IETF draft-eastlake-fnv). Not cryptographic: it detects changed inputs.
std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t state = kFnv64Offset);
/// FNV-1a of a file's bytes, or of a folder's regular files (sorted by name;
/// each file's name and bytes), not recursive. IoError naming the path if unreadable.
std::uint64_t hash_path(const std::string& path);
/// 16 lowercase hex digits.
std::string hex64(std::uint64_t value);

// ---- sharding ----------------------------------------------------------

/// Shard K of N (0 ≤ K < N).
struct ShardSpec {
  int index = 0;
  int count = 1;
};
/// Parses "K/N"; ConfigError naming the text unless 0 ≤ K < N.
ShardSpec parse_shard(const std::string& text);
/// True when fnv1a64(id) mod N == K: depends on the id only, so a re-run or a
/// reordered manifest keeps every job in its shard.
bool job_in_shard(const std::string& job_id, const ShardSpec& shard);

// ---- CT cache ----------------------------------------------------------

/// Bytes a CT holds in memory (its HU voxels).
std::size_t ct_image_bytes(const CtImage& ct);

/// CTs by folder, least recently used evicted first, holding at most
/// budget_bytes. A CT larger than the whole budget is loaded and returned but
/// not kept. Entries still in use by a job stay alive through their shared_ptr
/// after eviction (they no longer count against the budget). Thread-safe.
class CtCache {
 public:
  using Loader = std::function<CtImage(const std::string& ct_dir)>;
  CtCache(std::size_t budget_bytes, Loader loader);
  /// The CT of `ct_dir`, loaded on first use; the loader's exceptions propagate.
  std::shared_ptr<const CtImage> get(const std::string& ct_dir);

  std::size_t budget_bytes() const { return budget_bytes_; }
  std::size_t cached_bytes() const;
  std::size_t peak_cached_bytes() const;
  std::size_t loads() const;
  std::size_t hits() const;
  std::size_t evictions() const;

 private:
  struct Entry {
    std::shared_ptr<const CtImage> ct;
    std::size_t bytes = 0;
    std::uint64_t last_use = 0;
  };
  std::size_t budget_bytes_;
  Loader loader_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::uint64_t clock_ = 0;
  std::size_t cached_bytes_ = 0, peak_bytes_ = 0, loads_ = 0, hits_ = 0, evictions_ = 0;
};

// ---- setup and range scenarios -------------------------------------------

/// The plan with every beam's isocentre moved by −shift_mm (patient frame, mm):
/// the patient set up shifted by +shift_mm relative to the isocentre.
IonPlan shifted_plan(const IonPlan& plan, const Vec3& shift_mm);
/// The HU curve with every row's RSP multiplied by rsp_scale (> 0; ConfigError
/// otherwise); density unchanged. scale 1 returns an identical curve.
physics::HuCurve scaled_hu_curve(const physics::HuCurve& curve, double rsp_scale);
/// The TreatmentMachineName all beams agree on; ConfigError naming the plan
/// when they differ or none states it.
std::string plan_machine_name(const IonPlan& plan, const std::string& plan_path);

// ---- flags -------------------------------------------------------------

/// A rule marking a job for review, e.g. "PTV:D95<-3%" (D95 of PTV dropped by
/// more than 3 % from the reference), "PTV:D2>5Gy" (change of D2 above 5 Gy),
/// "Cord:max>45" (absolute maximum above 45 Gy), "gamma<95" (pass rate, %).
struct FlagRule {
  enum class Kind {
    kAbsoluteGy,     ///< the metric's value (Gy)
    kChangeGy,       ///< metric − reference metric (Gy); threshold written with "Gy"
    kChangePercent,  ///< 100·(metric − reference)/reference; threshold written with "%"
    kGammaPassRate,  ///< gamma pass rate (%)
  };
  std::string text;       ///< as given
  std::string structure;  ///< ROI name (empty for gamma)
  std::string metric;     ///< d98, d95, d50, d2, mean, min, max
  bool less = true;       ///< '<' (true) or '>'
  double threshold = 0;
  Kind kind = Kind::kAbsoluteGy;
};
/// Parses "ROI:METRIC<VALUE[%|Gy]" or "gamma<VALUE"; ConfigError naming the
/// text and the accepted forms.
FlagRule parse_flag_rule(const std::string& text);
/// Rules that fire on a job's metrics (the "metrics" member of its record); a
/// rule whose structure or reference is missing fires as "RULE: not evaluable".
std::vector<std::string> evaluate_flags(const std::vector<FlagRule>& rules, const nlohmann::json& metrics);

// ---- records -----------------------------------------------------------

/// Outcome of one job.
struct JobRecord {
  std::string id;
  std::string status;    ///< "ok", "failed", "skipped" (up to date), "cancelled"
  std::string category;  ///< error category name when failed (core/error.h), "memory" for out of memory
  std::string message;   ///< the error message when failed
  std::string out_path;
  int worker = -1;
  double read_s = 0, compute_s = 0, write_s = 0, total_s = 0;
  double max_dose_gy = 0;  ///< plan dose maximum (Gy)
  std::vector<std::string> flags;
  nlohmann::json metrics = nlohmann::json::object();  ///< gamma, DVH per structure (batch_dicom_io.h)
  /// For a job with `registration`: {"file", "checksum" (FNV-1a 64, hex, as in
  /// the sidecar), "ct_from_plan" (the 16 values of the rigid map, row-major,
  /// mm; once the registration was read)}; null otherwise.
  nlohmann::json registration;
};
nlohmann::json to_json(const JobRecord& record);
JobRecord job_record_from_json(const nlohmann::json& j);

/// What the batch did, with time by stage.
struct BatchSummary {
  std::string manifest_path;
  std::string shard;  ///< "K/N" or "" (whole manifest or merged)
  std::vector<JobRecord> records;  ///< in manifest order
  std::size_t ok = 0, failed = 0, skipped = 0, cancelled = 0, missing = 0;
  double wall_s = 0;
  double read_s = 0, compute_s = 0, write_s = 0;  ///< summed over jobs
  double compute_idle_s = 0;  ///< summed over workers: waiting for the reader
  int workers = 0;
  double jobs_per_s = 0;      ///< computed jobs (ok + failed) per wall second
  std::size_t ct_loads = 0, ct_hits = 0, ct_evictions = 0, ct_peak_bytes = 0, ct_budget_bytes = 0;
  bool all_succeeded() const { return failed == 0 && cancelled == 0 && missing == 0; }
};
nlohmann::json to_json(const BatchSummary& summary);
/// A table for people: one line per job (id, status, seconds, flags or
/// error), then totals, throughput and time by stage.
std::string format_summary_table(const BatchSummary& summary);

// ---- the runner ----------------------------------------------------------

/// I/O the runner delegates (batch_dicom_io.h implements them with dicom/ and compare/).
struct BatchIo {
  /// Reads a CT folder.
  std::function<CtImage(const std::string& ct_dir)> read_ct;
  /// Reads the job's plan and checks it against the CT (frame of reference);
  /// may fill a missing ct.patient_position: the CT passed is the job's own copy.
  /// For a job with `registration` the frames differ by design: no frame
  /// check, and ct.patient_position is set to the plan's setup position where
  /// the plan states one (the beams' geometry is defined in the plan's frame).
  std::function<IonPlan(const BatchJob& job, CtImage& ct)> read_plan;
  /// For a job with `registration`: the rigid map ct_from_plan from the plan's
  /// frame of reference onto the CT's, read from job.registration_path
  /// (batch_dicom_io.h: a DICOM Spatial Registration). Required for such jobs.
  std::function<RigidTransform(const BatchJob& job, const std::string& plan_frame_uid, const std::string& ct_frame_uid)>
      read_registration;
  /// Writes the plan dose (Gy, all fractions) atomically to job.out_path. For
  /// a job with `registration` the dose is on the CT's grid in the CT's frame
  /// and the plan passed carries the CT's FrameOfReferenceUID.
  std::function<void(const BatchJob& job, const Volume<float>& plan_dose_gy, const IonPlan& plan, const CtImage& ct)>
      write_dose;
  /// Comparison with job.reference_dose_path / job.structures_path (optional
  /// hook); `ct` is the CT whose frame the dose is in (for a job with
  /// `registration`, the new CT's, not the plan's).
  std::function<nlohmann::json(const BatchJob& job, const Volume<float>& plan_dose_gy, const CtImage& ct)> evaluate;
};

struct BatchOptions {
  std::string default_backend = "cpu";  ///< for jobs that name none
  int workers = 1;                      ///< compute workers (≥ 1)
  /// CUDA devices of the GPU workers: worker w runs on gpu_devices[w mod size]
  /// (empty: device 0). Set from --gpus; each worker's engines stay on its device.
  std::vector<int> gpu_devices;
  int threads_per_worker = 0;           ///< engine threads (0 = cores / workers)
  std::size_t ct_cache_bytes = std::size_t{4} << 30;
  double ray_pitch_mm = 1.0;            ///< engine BEV ray pitch for every job
  double depth_step_mm = 1.0;           ///< engine BEV slice thickness for every job
  bool force = false;                   ///< recompute jobs that are up to date
  ShardSpec shard;
  std::vector<FlagRule> flags;
  std::string records_path;             ///< JSON-lines records (truncated at start); "" = none
  std::string version;                  ///< protondose version, part of the sidecar
  std::size_t queue_depth = 2;          ///< prepared jobs the reader keeps ahead of the workers
  /// Writer threads (RT Dose, comparison, sidecar, record). On a warm GPU the
  /// single writer was as busy as the compute worker (docs/benchmarks-batch.md).
  int writers = 2;
  /// Set (e.g. by a SIGINT handler) to stop starting jobs; those not started are "cancelled".
  const std::atomic<bool>* stop = nullptr;
  /// Called from a writer thread after each record, one call at a time (progress display).
  std::function<void(const JobRecord& record, std::size_t done, std::size_t total)> on_record;
  void validate() const;  ///< ConfigError naming the option
};

/// Path of the sidecar record beside an output: out + ".batch.json".
std::string sidecar_path(const std::string& out_path);
/// The sidecar a job's output would carry (inputs' checksums, options,
/// version); the output checksum and record are added when it is written.
/// `checksums` (path → hex), when given, memoises the inputs' checksums across
/// jobs: 50 jobs on one CT read its files once, not 50 times.
nlohmann::json job_fingerprint(const BatchJob& job, const BatchOptions& options,
                               std::map<std::string, std::string>* checksums = nullptr);
/// True when out_path exists and its sidecar matches the fingerprint and the
/// output's checksum.
bool job_up_to_date(const BatchJob& job, const nlohmann::json& fingerprint);

/// Runs the manifest's jobs (of options.shard). Never throws for a job's
/// failure: it is recorded. Throws ConfigError for invalid options, IoError
/// when the records file cannot be written.
BatchSummary run_batch(const Manifest& manifest, const BatchOptions& options, const BatchIo& io);

/// Gathers the records of every shard (the JSON-lines files) into one summary
/// over the manifest's jobs: a job with no record is "missing", a job with
/// several takes the last one (a later re-run). Malformed lines are an InputError
/// naming the file and line, except a truncated last line (a killed writer), skipped.
BatchSummary merge_records(const Manifest& manifest, const std::vector<std::string>& record_files);

/// An sbatch job-array script running `protondose batch` shards
/// (docs/slurm.md). `batch_args` are extra arguments (already quoted).
std::string slurm_array_script(const std::string& executable, const std::string& manifest_path, int array_size,
                               int gpus_per_task, const std::string& report_dir, const std::string& batch_args);

/// How many of `workers` workers run on CUDA device `device` when worker w
/// runs on gpu_devices[w mod size] (empty list: every worker on device 0) —
/// the engines of those workers share the device's memory.
int workers_on_device(const std::vector<int>& gpu_devices, int workers, int device);

/// Device indices from "all", "0,1" or "0" against `device_count` devices:
/// UnavailableError naming the device and the count when one does not exist
/// (or none exist), ConfigError for malformed text.
std::vector<int> parse_gpu_list(const std::string& text, int device_count);

}  // namespace protondose::engine
