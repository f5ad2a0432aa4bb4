// `protondose batch` runner: reader thread → compute workers → writer thread,
// CT cache, sidecars for resume, records and summary (docs/batch.md).
#include "protondose/engine/batch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "made_once.h"
#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/engine/registration.h"
#include "protondose/physics/beam_model.h"

namespace protondose::engine {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

// ---- checksums ---------------------------------------------------------

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t state) {
  constexpr std::uint64_t kPrime = 1099511628211ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    state ^= p[i];
    state *= kPrime;
  }
  return state;
}

namespace {
std::uint64_t hash_file(const fs::path& path, std::uint64_t state) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read '" + path.string() + "' to checksum it");
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    state = fnv1a64(buf.data(), static_cast<std::size_t>(in.gcount()), state);
  }
  if (in.bad()) throw IoError("error reading '" + path.string() + "' to checksum it");
  return state;
}
}  // namespace

std::uint64_t hash_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    if (ec) throw IoError("cannot list '" + path + "' to checksum it: " + ec.message());
    std::sort(files.begin(), files.end());
    std::uint64_t h = kFnv64Offset;
    for (const auto& f : files) {
      const std::string name = f.filename().string();
      h = fnv1a64(name.data(), name.size() + 1, h);  // with the NUL: names and bytes cannot run together
      h = hash_file(f, h);
    }
    return h;
  }
  return hash_file(path, kFnv64Offset);
}

std::string hex64(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

// ---- sharding ----------------------------------------------------------

ShardSpec parse_shard(const std::string& text) {
  ShardSpec s;
  const auto slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    std::size_t used_k = 0, used_n = 0;
    s.index = std::stoi(text.substr(0, slash), &used_k);
    s.count = std::stoi(text.substr(slash + 1), &used_n);
    if (used_k != slash || used_n != text.size() - slash - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw ConfigError("--shard '" + text + "': expected K/N with integers 0 <= K < N (e.g. 0/4)");
  }
  if (s.count < 1 || s.index < 0 || s.index >= s.count)
    throw ConfigError("--shard '" + text + "': expected 0 <= K < N, got K = " + std::to_string(s.index) +
                      ", N = " + std::to_string(s.count));
  return s;
}

bool job_in_shard(const std::string& job_id, const ShardSpec& shard) {
  return fnv1a64(job_id.data(), job_id.size()) % static_cast<std::uint64_t>(shard.count) ==
         static_cast<std::uint64_t>(shard.index);
}

// ---- CT cache ----------------------------------------------------------

std::size_t ct_image_bytes(const CtImage& ct) { return ct.hu.data.size() * sizeof(float); }

CtCache::CtCache(std::size_t budget_bytes, Loader loader) : budget_bytes_(budget_bytes), loader_(std::move(loader)) {}

std::shared_ptr<const CtImage> CtCache::get(const std::string& ct_dir) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(ct_dir);
    if (it != entries_.end()) {
      ++hits_;
      it->second.last_use = ++clock_;
      return it->second.ct;
    }
  }
  // Loading takes seconds: outside the lock. Two threads asking for the same
  // new CT may both load it; the second insertion is dropped.
  auto ct = std::make_shared<const CtImage>(loader_(ct_dir));
  const std::size_t bytes = ct_image_bytes(*ct);
  std::lock_guard<std::mutex> lock(mutex_);
  ++loads_;
  if (bytes > budget_bytes_ || entries_.count(ct_dir)) return ct;
  while (cached_bytes_ + bytes > budget_bytes_ && !entries_.empty()) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    cached_bytes_ -= oldest->second.bytes;
    entries_.erase(oldest);
    ++evictions_;
  }
  entries_[ct_dir] = Entry{ct, bytes, ++clock_};
  cached_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, cached_bytes_);
  return ct;
}

std::size_t CtCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}
std::size_t CtCache::peak_cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_bytes_;
}
std::size_t CtCache::loads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loads_;
}
std::size_t CtCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}
std::size_t CtCache::evictions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return evictions_;
}

// ---- scenarios -----------------------------------------------------------

IonPlan shifted_plan(const IonPlan& plan, const Vec3& shift_mm) {
  IonPlan p = plan;
  for (IonBeam& b : p.beams)
    for (int a = 0; a < 3; ++a) b.isocenter_mm[a] -= shift_mm[a];
  return p;
}

physics::HuCurve scaled_hu_curve(const physics::HuCurve& curve, double rsp_scale) {
  if (!(rsp_scale > 0) || !std::isfinite(rsp_scale))
    throw ConfigError("rsp_scale " + std::to_string(rsp_scale) + " must be a finite number > 0");
  if (rsp_scale == 1.0) return curve;
  std::vector<physics::HuCurvePoint> points = curve.points();
  for (auto& p : points) p.rsp *= rsp_scale;
  char tag[64];
  std::snprintf(tag, sizeof tag, " (RSP x %.6g)", rsp_scale);
  return physics::HuCurve(std::move(points), curve.source() + tag);
}

std::string plan_machine_name(const IonPlan& plan, const std::string& plan_path) {
  std::string name;
  for (const auto& beam : plan.beams) {
    if (beam.machine_name.empty()) continue;
    if (!name.empty() && name != beam.machine_name)
      throw ConfigError(plan_path + ": beams name different machines ('" + name + "', '" + beam.machine_name +
                        "'); choose one with --machine");
    name = beam.machine_name;
  }
  if (name.empty())
    throw ConfigError(plan_path + ": no beam states TreatmentMachineName (300A,00B2); give --machine");
  return name;
}

// ---- flags -------------------------------------------------------------

FlagRule parse_flag_rule(const std::string& text) {
  const std::string accepted =
      "; accepted: ROI:METRIC<VALUE or >VALUE with METRIC one of D98, D95, D50, D2, mean, min, max and VALUE in Gy "
      "(absolute), Gy-suffixed (change from the reference) or %-suffixed (relative change), or gamma<PASS_PERCENT";
  FlagRule r;
  r.text = text;
  const auto op = text.find_first_of("<>");
  if (op == std::string::npos || op == 0) throw ConfigError("--flag '" + text + "': no '<' or '>'" + accepted);
  r.less = text[op] == '<';
  std::string lhs = text.substr(0, op);
  std::string rhs = text.substr(op + 1);
  if (rhs.size() >= 1 && rhs.back() == '%') {
    r.kind = FlagRule::Kind::kChangePercent;
    rhs.pop_back();
  } else if (rhs.size() >= 2 && (rhs.substr(rhs.size() - 2) == "Gy" || rhs.substr(rhs.size() - 2) == "gy")) {
    r.kind = FlagRule::Kind::kChangeGy;
    rhs.resize(rhs.size() - 2);
  }
  std::size_t used = 0;
  try {
    r.threshold = std::stod(rhs, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != rhs.size()) throw ConfigError("--flag '" + text + "': '" + rhs + "' is not a number" + accepted);
  std::string lower = lhs;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "gamma") {
    if (r.kind != FlagRule::Kind::kAbsoluteGy) throw ConfigError("--flag '" + text + "': gamma takes a pass rate in per cent without a suffix" + accepted);
    r.kind = FlagRule::Kind::kGammaPassRate;
    r.metric = "gamma";
    return r;
  }
  const auto colon = lhs.rfind(':');
  if (colon == std::string::npos || colon == 0) throw ConfigError("--flag '" + text + "': no 'ROI:' before the metric" + accepted);
  r.structure = lhs.substr(0, colon);
  r.metric = lower.substr(colon + 1);
  static const std::vector<std::string> kMetrics{"d98", "d95", "d50", "d2", "mean", "min", "max"};
  if (std::find(kMetrics.begin(), kMetrics.end(), r.metric) == kMetrics.end())
    throw ConfigError("--flag '" + text + "': unknown metric '" + lhs.substr(colon + 1) + "'" + accepted);
  return r;
}

std::vector<std::string> evaluate_flags(const std::vector<FlagRule>& rules, const json& metrics) {
  std::vector<std::string> fired;
  for (const FlagRule& r : rules) {
    double value = 0;
    bool evaluable = false;
    if (r.kind == FlagRule::Kind::kGammaPassRate) {
      if (metrics.contains("gamma") && metrics["gamma"].contains("pass_rate_percent")) {
        value = metrics["gamma"]["pass_rate_percent"].get<double>();
        evaluable = true;
      }
    } else if (metrics.contains("structures") && metrics["structures"].contains(r.structure)) {
      const json& s = metrics["structures"][r.structure];
      const std::string key = r.metric + "_gy";
      if (r.kind == FlagRule::Kind::kAbsoluteGy && s.contains(key)) {
        value = s[key].get<double>();
        evaluable = true;
      } else if (s.contains("reference") && s["reference"].contains(key) && s.contains(key)) {
        const double now = s[key].get<double>();
        const double ref = s["reference"][key].get<double>();
        if (r.kind == FlagRule::Kind::kChangeGy) {
          value = now - ref;
          evaluable = true;
        } else if (ref > 0) {
          value = 100.0 * (now - ref) / ref;
          evaluable = true;
        }
      }
    }
    if (!evaluable) {
      fired.push_back(r.text + ": not evaluable");
    } else if (r.less ? value < r.threshold : value > r.threshold) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " (%.4g)", value);
      fired.push_back(r.text + buf);
    }
  }
  return fired;
}

// ---- records -----------------------------------------------------------

json to_json(const JobRecord& r) {
  json j{{"id", r.id},
         {"status", r.status},
         {"out", r.out_path},
         {"worker", r.worker},
         {"times_s", {{"read", r.read_s}, {"compute", r.compute_s}, {"write", r.write_s}, {"total", r.total_s}}},
         {"max_dose_gy", r.max_dose_gy},
         {"flags", r.flags},
         {"metrics", r.metrics}};
  if (!r.category.empty()) j["category"] = r.category;
  if (!r.message.empty()) j["message"] = r.message;
  if (!r.registration.is_null()) j["registration"] = r.registration;
  return j;
}

JobRecord job_record_from_json(const json& j) {
  JobRecord r;
  r.id = j.at("id").get<std::string>();
  r.status = j.at("status").get<std::string>();
  r.out_path = j.value("out", "");
  r.worker = j.value("worker", -1);
  if (j.contains("times_s")) {
    const json& t = j["times_s"];
    r.read_s = t.value("read", 0.0);
    r.compute_s = t.value("compute", 0.0);
    r.write_s = t.value("write", 0.0);
    r.total_s = t.value("total", 0.0);
  }
  r.max_dose_gy = j.value("max_dose_gy", 0.0);
  if (j.contains("flags")) r.flags = j["flags"].get<std::vector<std::string>>();
  if (j.contains("metrics")) r.metrics = j["metrics"];
  r.category = j.value("category", "");
  r.message = j.value("message", "");
  if (j.contains("registration")) r.registration = j["registration"];
  return r;
}

namespace {
void tally(BatchSummary& s) {
  s.ok = s.failed = s.skipped = s.cancelled = s.missing = 0;
  s.read_s = s.compute_s = s.write_s = 0;
  for (const JobRecord& r : s.records) {
    if (r.status == "ok") ++s.ok;
    else if (r.status == "failed") ++s.failed;
    else if (r.status == "skipped") ++s.skipped;
    else if (r.status == "cancelled") ++s.cancelled;
    else ++s.missing;
    s.read_s += r.read_s;
    s.compute_s += r.compute_s;
    s.write_s += r.write_s;
  }
  s.jobs_per_s = s.wall_s > 0 ? static_cast<double>(s.ok + s.failed) / s.wall_s : 0.0;
}
}  // namespace

json to_json(const BatchSummary& s) {
  json records = json::array();
  for (const auto& r : s.records) records.push_back(to_json(r));
  json failures = json::array();
  for (const auto& r : s.records)
    if (r.status == "failed") failures.push_back({{"id", r.id}, {"category", r.category}, {"message", r.message}});
  return {{"manifest", s.manifest_path},
          {"shard", s.shard},
          {"jobs", s.records.size()},
          {"ok", s.ok},
          {"failed", s.failed},
          {"skipped", s.skipped},
          {"cancelled", s.cancelled},
          {"missing", s.missing},
          {"all_succeeded", s.all_succeeded()},
          {"wall_s", s.wall_s},
          {"jobs_per_s", s.jobs_per_s},
          {"workers", s.workers},
          {"stage_s", {{"read", s.read_s}, {"compute", s.compute_s}, {"write", s.write_s}, {"compute_idle", s.compute_idle_s}}},
          {"ct_cache", {{"loads", s.ct_loads}, {"hits", s.ct_hits}, {"evictions", s.ct_evictions},
                        {"peak_bytes", s.ct_peak_bytes}, {"budget_bytes", s.ct_budget_bytes}}},
          {"failures", failures},
          {"records", records}};
}

std::string format_summary_table(const BatchSummary& s) {
  std::ostringstream o;
  std::size_t w = 4;
  for (const auto& r : s.records) w = std::max(w, r.id.size());
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-9s  %8s  %8s  %s\n", static_cast<int>(w), "job", "status", "run_s", "done_at_s",
                "flags / error");
  o << line;
  for (const auto& r : s.records) {
    std::string note;
    if (r.status == "failed") {
      note = r.category + ": " + r.message;
      if (note.size() > 160) note = note.substr(0, 157) + "...";
    } else {
      for (const auto& f : r.flags) note += (note.empty() ? "" : "; ") + f;
    }
    // run: this job's read + compute + write; done at: its latency since it was read.
    std::snprintf(line, sizeof line, "%-*s  %-9s  %8.2f  %8.2f  ", static_cast<int>(w), r.id.c_str(), r.status.c_str(),
                  r.read_s + r.compute_s + r.write_s, r.total_s);
    o << line << note << "\n";
  }
  std::snprintf(line, sizeof line,
                "%zu job(s): %zu ok, %zu failed, %zu skipped (up to date), %zu cancelled, %zu missing; "
                "%.2f s wall, %.3g jobs/s with %d worker(s)\n",
                s.records.size(), s.ok, s.failed, s.skipped, s.cancelled, s.missing, s.wall_s, s.jobs_per_s, s.workers);
  o << line;
  std::snprintf(line, sizeof line, "stage time (summed over jobs): read %.2f s, compute %.2f s, write %.2f s; workers idle %.2f s\n",
                s.read_s, s.compute_s, s.write_s, s.compute_idle_s);
  o << line;
  return o.str();
}

// ---- sidecars ----------------------------------------------------------

std::string sidecar_path(const std::string& out_path) { return out_path + ".batch.json"; }

json job_fingerprint(const BatchJob& job, const BatchOptions& options, std::map<std::string, std::string>* checksums) {
  auto sum = [&](const std::string& path) {
    if (!checksums) return hex64(hash_path(path));
    auto it = checksums->find(path);
    if (it == checksums->end()) it = checksums->emplace(path, hex64(hash_path(path))).first;
    return it->second;
  };
  json inputs{{"ct", sum(job.ct_dir)}, {"plan", sum(job.plan_path)}};
  if (!job.hu_curve.empty()) inputs["hu_curve"] = sum(job.hu_curve);
  if (!job.structures_path.empty()) inputs["structures"] = sum(job.structures_path);
  if (!job.reference_dose_path.empty()) inputs["reference_dose"] = sum(job.reference_dose_path);
  if (!job.machine.empty() && fs::exists(job.machine)) inputs["machine"] = sum(job.machine);
  if (!job.registration_path.empty()) inputs["registration"] = sum(job.registration_path);
  std::vector<std::string> flags;
  for (const auto& f : options.flags) flags.push_back(f.text);
  json o{{"shift_mm", job.shift_mm},
         {"rsp_scale", job.rsp_scale},
         {"grid_mm", job.grid_mm ? json(*job.grid_mm) : json(nullptr)},
         {"backend", job.backend.empty() ? options.default_backend : job.backend},
         {"machine", job.machine},
         {"hu_curve", job.hu_curve},
         {"ray_pitch_mm", options.ray_pitch_mm},
         {"depth_step_mm", options.depth_step_mm},
         {"flags", flags}};
  return {{"id", job.id}, {"protondose_version", options.version}, {"inputs", inputs}, {"options", o}};
}

bool job_up_to_date(const BatchJob& job, const json& fingerprint) {
  std::error_code ec;
  if (!fs::is_regular_file(job.out_path, ec) || !fs::is_regular_file(sidecar_path(job.out_path), ec)) return false;
  json side;
  try {
    std::ifstream in(sidecar_path(job.out_path));
    side = json::parse(in);
  } catch (const std::exception&) {
    return false;  // an unreadable sidecar means "not known to be done": recompute
  }
  for (const char* key : {"id", "protondose_version", "inputs", "options"})
    if (!side.contains(key) || side[key] != fingerprint[key]) return false;
  return side.contains("output") && side["output"] == hex64(hash_path(job.out_path));
}

// ---- the runner ----------------------------------------------------------

void BatchOptions::validate() const {
  if (workers < 1) throw ConfigError("--workers " + std::to_string(workers) + ": need at least 1");
  if (threads_per_worker < 0) throw ConfigError("threads per worker " + std::to_string(threads_per_worker) + " < 0");
  if (ct_cache_bytes == 0) throw ConfigError("--ct-cache-mb 0: the CT cache needs a budget > 0");
  if (queue_depth < 1) throw ConfigError("queue depth must be >= 1");
  if (writers < 1) throw ConfigError("--writers " + std::to_string(writers) + ": need at least 1");
  parse_backend(default_backend);
  if (!(ray_pitch_mm > 0) || !(depth_step_mm > 0)) throw ConfigError("--ray-pitch and --depth-step must be > 0 mm");
}

namespace {

/// A bounded multi-producer, multi-consumer queue that can be closed.
template <class T>
class Channel {
 public:
  explicit Channel(std::size_t capacity) : capacity_(capacity) {}
  void push(T v) {
    std::unique_lock<std::mutex> lock(m_);
    not_full_.wait(lock, [&] { return q_.size() < capacity_; });
    q_.push_back(std::move(v));
    not_empty_.notify_one();
  }
  /// False when closed and drained.
  bool pop(T& v) {
    std::unique_lock<std::mutex> lock(m_);
    not_empty_.wait(lock, [&] { return !q_.empty() || closed_; });
    if (q_.empty()) return false;
    v = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(m_);
    closed_ = true;
    not_empty_.notify_all();
  }

 private:
  std::size_t capacity_;
  std::mutex m_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> q_;
  bool closed_ = false;
};

struct WorkItem {
  const BatchJob* job = nullptr;
  json fingerprint;
  JobRecord record;
  bool failed = false;
  std::shared_ptr<const CtImage> ct;  ///< the cached CT (or the job's own copy when the plan filled a field)
  /// With a registration: the CT re-expressed in the plan's frame (computed on; released after compute).
  std::shared_ptr<const CtImage> plan_frame_ct;
  std::optional<RigidTransform> ct_from_plan;  ///< with a registration: the plan's frame onto the CT's
  IonPlan plan;
  Volume<float> plan_dose_gy;
  Clock::time_point started;
};

void fail(JobRecord& r, const std::exception& e) {
  r.status = "failed";
  if (const auto* pe = dynamic_cast<const Error*>(&e)) {
    r.category = category_name(pe->category());
  } else if (dynamic_cast<const std::bad_alloc*>(&e)) {
    r.category = "memory";
  } else {
    r.category = "internal";
  }
  r.message = e.what();
  if (r.category == "memory") r.message = std::string("out of memory: ") + e.what();
}

/// Appends whole lines with one write(2) each, so a killed process leaves at
/// most an incomplete last line.
class RecordsFile {
 public:
  explicit RecordsFile(const std::string& path) : path_(path) {
    if (path.empty()) return;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError("cannot open the records file '" + path + "': " + std::strerror(errno));
  }
  ~RecordsFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  RecordsFile(const RecordsFile&) = delete;
  RecordsFile& operator=(const RecordsFile&) = delete;
  /// One line, with a single write() (O_APPEND: lines of concurrent writers
  /// never interleave; a killed process loses nothing written).
  void append(const json& j) {
    if (fd_ < 0) return;
    const std::string line = j.dump() + "\n";
    const ssize_t n = ::write(fd_, line.data(), line.size());
    if (n != static_cast<ssize_t>(line.size()))
      throw IoError("cannot append to the records file '" + path_ + "': " + std::strerror(errno));
  }
  /// To the disk (an OS crash or power loss). Called outside the records lock:
  /// writer threads flushing at once share the disk's work instead of queueing
  /// one fdatasync behind another.
  void sync() const {
    if (fd_ >= 0) ::fdatasync(fd_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Removes temporary files (core/atomic_file.h names them OUT.tmp.PID.N) left
/// by a killed run writing `out_path` or its sidecar.
void remove_stale_temporaries(const std::string& out_path) {
  const fs::path out(out_path);
  std::error_code ec;
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  const std::string name = out.filename().string();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    for (const std::string& stem : {name + ".tmp.", name + ".batch.json.tmp."})
      if (f.rfind(stem, 0) == 0) {
        fs::remove(e.path(), ec);
        spdlog::info("removed '{}', left by an interrupted run", e.path().string());
      }
  }
}

}  // namespace

BatchSummary run_batch(const Manifest& manifest, const BatchOptions& options, const BatchIo& io) {
  options.validate();
  const auto t_start = Clock::now();
  BatchSummary summary;
  summary.manifest_path = manifest.path;
  if (options.shard.count > 1)
    summary.shard = std::to_string(options.shard.index) + "/" + std::to_string(options.shard.count);
  summary.workers = options.workers;
  summary.ct_budget_bytes = options.ct_cache_bytes;

  RecordsFile records(options.records_path);
  std::mutex records_mutex;
  std::map<std::string, JobRecord> done;  // by id
  std::size_t total = 0;
  auto emit = [&](const JobRecord& r) {
    {
      std::lock_guard<std::mutex> lock(records_mutex);
      records.append(to_json(r));
      done[r.id] = r;
      if (options.on_record) options.on_record(r, done.size(), total);
    }
    records.sync();
  };

  // Which jobs: this shard's, less those already done (their sidecar matches).
  std::vector<WorkItem> todo;
  std::vector<JobRecord> skipped;
  std::map<std::string, std::string> checksums;  // input path → checksum, read once per run
  for (const BatchJob& job : manifest.jobs) {
    if (!job_in_shard(job.id, options.shard)) continue;
    WorkItem w;
    w.job = &job;
    w.record.id = job.id;
    w.record.out_path = job.out_path;
    remove_stale_temporaries(job.out_path);
    try {
      w.fingerprint = job_fingerprint(job, options, &checksums);
      if (!job.registration_path.empty())
        w.record.registration = {{"file", job.registration_path},
                                 {"checksum", w.fingerprint["inputs"]["registration"]}};
    } catch (const std::exception& e) {
      w.failed = true;
      fail(w.record, e);
    }
    if (!w.failed && !options.force && job_up_to_date(job, w.fingerprint)) {
      JobRecord r = w.record;
      try {
        std::ifstream in(sidecar_path(job.out_path));
        const json side = json::parse(in);
        if (side.contains("record")) r = job_record_from_json(side["record"]);
      } catch (const std::exception&) {
      }
      r.status = "skipped";
      r.read_s = r.compute_s = r.write_s = r.total_s = 0;
      skipped.push_back(r);
      continue;
    }
    todo.push_back(std::move(w));
  }
  total = todo.size() + skipped.size();
  for (const JobRecord& r : skipped) emit(r);

  CtCache cache(options.ct_cache_bytes, io.read_ct);
  const int threads = options.threads_per_worker > 0
                          ? options.threads_per_worker
                          : std::max(1, default_thread_count() / options.workers);

  // Beam models and HU curves: loaded once, shared by every worker's engines.
  std::mutex data_mutex;
  std::map<std::string, std::shared_ptr<const physics::BeamModel>> machines;
  std::map<std::string, std::shared_ptr<const physics::HuCurve>> curves;
  auto machine_for = [&](const std::string& name) {
    std::lock_guard<std::mutex> lock(data_mutex);
    auto& m = machines[name];
    if (!m) m = std::make_shared<const physics::BeamModel>(physics::load_machine(name));
    return m;
  };
  auto curve_for = [&](const std::string& path, double scale) {
    char key_scale[32];
    std::snprintf(key_scale, sizeof key_scale, "|%.17g", scale);
    std::lock_guard<std::mutex> lock(data_mutex);
    auto& c = curves[path + key_scale];
    if (!c) {
      auto& base = curves[path + "|1"];
      if (!base)
        base = std::make_shared<const physics::HuCurve>(path.empty() ? physics::default_hu_curve()
                                                                     : physics::load_hu_curve_csv(path));
      c = scale == 1.0 ? base : std::make_shared<const physics::HuCurve>(scaled_hu_curve(*base, scale));
    }
    return c;
  };

  // The CT converted once per (CT, engine configuration) for every worker: a
  // PreparedCt depends only on the CT, the HU curve and options every worker's
  // engine shares (DoseEngine::prepare), and each GPU executor keeps its own
  // device copy. One entry per configuration: the latest CT (a batch usually
  // runs through the jobs of one CT, then the next).
  MadeOnce<std::string, std::shared_ptr<const PreparedCt>> preparations;

  Channel<std::unique_ptr<WorkItem>> to_compute(options.queue_depth);
  Channel<std::unique_ptr<WorkItem>> to_write(options.queue_depth + static_cast<std::size_t>(options.workers));
  auto stopping = [&] { return options.stop && options.stop->load(); };

  std::thread reader([&] {
    for (WorkItem& w : todo) {
      auto item = std::make_unique<WorkItem>(std::move(w));
      item->started = Clock::now();
      if (stopping()) {
        item->record.status = "cancelled";
        to_write.push(std::move(item));
        continue;
      }
      if (!item->failed) {
        try {
          std::shared_ptr<const CtImage> ct = cache.get(item->job->ct_dir);
          // read_plan may fill the CT's PatientPosition from the plan: give it a
          // copy only when it does (a copy of a CT is cheap next to a dose).
          CtImage probe;
          probe.patient_position = ct->patient_position;
          probe.frame_of_reference_uid = ct->frame_of_reference_uid;
          probe.study_instance_uid = ct->study_instance_uid;
          probe.patient_id = ct->patient_id;
          probe.patient_name = ct->patient_name;
          probe.series_instance_uid = ct->series_instance_uid;
          probe.hu.grid = ct->hu.grid;
          const IonPlan plan = io.read_plan(*item->job, probe);
          if (!item->job->registration_path.empty()) {
            // The plan's frame onto the CT's: compute on the CT re-expressed in the
            // plan's frame (registration.h), the plan and its shift as planned.
            if (!io.read_registration)
              throw UnavailableError("job '" + item->job->id +
                                     "': key 'registration': this program has no Spatial Registration reader");
            const RigidTransform ct_from_plan =
                io.read_registration(*item->job, plan.frame_of_reference_uid, ct->frame_of_reference_uid);
            item->ct_from_plan = ct_from_plan;
            item->record.registration["ct_from_plan"] = ct_from_plan.matrix_row_major();
            item->plan_frame_ct = std::make_shared<const CtImage>(
                ct_in_plan_frame(*ct, ct_from_plan, plan.frame_of_reference_uid, probe.patient_position));
          }
          item->plan = shifted_plan(plan, item->job->shift_mm);
          if (item->job->registration_path.empty() && probe.patient_position != ct->patient_position) {
            auto own = std::make_shared<CtImage>(*ct);
            own->patient_position = probe.patient_position;
            ct = own;
          }
          item->ct = ct;
        } catch (const std::exception& e) {
          item->failed = true;
          fail(item->record, e);
        }
      }
      item->record.read_s = seconds_since(item->started);
      if (item->failed) {
        to_write.push(std::move(item));
      } else {
        to_compute.push(std::move(item));
      }
    }
    to_compute.close();
  });

  std::vector<double> idle_s(static_cast<std::size_t>(options.workers), 0.0);
  std::vector<std::thread> workers;
  for (int wi = 0; wi < options.workers; ++wi) {
    workers.emplace_back([&, wi] {
      if (!options.gpu_devices.empty()) {
        // Start this worker's GPU (context, kernel attributes) while the reader
        // reads the first job, rather than inside the first job. A failure here
        // is left to the first job, which reports it with its id.
        try {
          initialize_gpu_device(options.gpu_devices[static_cast<std::size_t>(wi) % options.gpu_devices.size()]);
        } catch (const std::exception&) {
        }
      }
      /// A warm engine of this worker and the last CT it prepared (kept alive by
      /// the shared pointer, so the cached conversion can never outlive it).
      struct WarmEngine {
        std::unique_ptr<DoseEngine> engine;
        std::shared_ptr<const CtImage> ct;
        std::shared_ptr<const PreparedCt> prepared;
      };
      std::map<std::string, WarmEngine> engines;  // warm engines of this worker
      for (;;) {
        const auto t_wait = Clock::now();
        std::unique_ptr<WorkItem> item;
        if (!to_compute.pop(item)) break;
        idle_s[static_cast<std::size_t>(wi)] += seconds_since(t_wait);
        JobRecord& r = item->record;
        r.worker = wi;
        const auto t0 = Clock::now();
        if (stopping()) {
          r.status = "cancelled";
        } else {
          try {
            const BatchJob& job = *item->job;
            const std::string machine = job.machine.empty() ? plan_machine_name(item->plan, job.plan_path) : job.machine;
            const std::string backend = job.backend.empty() ? options.default_backend : job.backend;
            char key[512];
            std::snprintf(key, sizeof key, "%s|%s|%.17g|%s|%.17g", machine.c_str(), job.hu_curve.c_str(),
                          job.rsp_scale, backend.c_str(), job.grid_mm ? *job.grid_mm : 0.0);
            auto it = engines.find(key);
            if (it == engines.end()) {
              DoseEngineOptions o;
              o.backend = parse_backend(backend);
              o.output_spacing_mm = job.grid_mm;
              o.ray_pitch_mm = options.ray_pitch_mm;
              o.depth_step_mm = options.depth_step_mm;
              o.threads = threads;
              o.gpu_device = options.gpu_devices.empty()
                                 ? 0
                                 : options.gpu_devices[static_cast<std::size_t>(wi) % options.gpu_devices.size()];
              // The workers on this device compute at the same time: each plans for its share.
              o.gpu_memory_share = 1.0 / std::max(1, workers_on_device(options.gpu_devices, options.workers, o.gpu_device));
              o.require_machine_name_match = job.machine.empty();
              // A worker keeps a handful of engines warm; more configurations start over.
              if (engines.size() >= 8) engines.clear();
              WarmEngine warm;
              warm.engine = std::make_unique<DoseEngine>(*machine_for(machine), *curve_for(job.hu_curve, job.rsp_scale), o);
              it = engines.emplace(key, std::move(warm)).first;
            }
            // The CT converted for this engine stays warm (on the GPU: in device
            // memory) while consecutive jobs of the worker share it.
            WarmEngine& warm = it->second;
            std::shared_ptr<const PreparedCt> prepared;
            if (item->plan_frame_ct) {
              prepared = warm.engine->prepare(*item->plan_frame_ct);
            } else {
              if (warm.ct != item->ct) {
                warm.prepared = preparations.get(key, item->ct, [&] { return warm.engine->prepare(*item->ct); });
                warm.ct = item->ct;
              }
              prepared = warm.prepared;
            }
            DoseResult d = warm.engine->compute(*prepared, item->plan);
            item->plan_dose_gy = d.dose_gy;
            if (item->ct_from_plan) {
              // Back to the CT's frame, on the grid a job without registration gets.
              item->plan_dose_gy = dose_in_ct_frame(std::move(item->plan_dose_gy), *item->ct_from_plan,
                                                    output_grid(item->ct->hu.grid, job.grid_mm));
              item->plan.frame_of_reference_uid = item->ct->frame_of_reference_uid;
              item->plan_frame_ct.reset();
            }
            for (float& v : item->plan_dose_gy.data) v = static_cast<float>(v * d.fractions);
            r.max_dose_gy = d.max_dose_gy * d.fractions;
          } catch (const std::exception& e) {
            item->failed = true;
            fail(r, e);
          }
        }
        r.compute_s = seconds_since(t0);
        to_write.push(std::move(item));
      }
    });
  }

  std::exception_ptr writer_error;
  std::mutex writer_error_mutex;
  std::vector<std::thread> writers;
  for (int wi = 0; wi < options.writers; ++wi) writers.emplace_back([&] {
    std::unique_ptr<WorkItem> item;
    while (to_write.pop(item)) {
      JobRecord& r = item->record;
      const auto t0 = Clock::now();
      if (!item->failed && r.status != "cancelled") {
        try {
          io.write_dose(*item->job, item->plan_dose_gy, item->plan, *item->ct);
          if (io.evaluate && (!item->job->reference_dose_path.empty() || !item->job->structures_path.empty()))
            r.metrics = io.evaluate(*item->job, item->plan_dose_gy, *item->ct);
          r.flags = evaluate_flags(options.flags, r.metrics);
          r.status = "ok";
        } catch (const std::exception& e) {
          item->failed = true;
          fail(r, e);
        }
      }
      r.write_s = seconds_since(t0);
      r.total_s = seconds_since(item->started);
      if (r.status == "ok") {
        try {
          json side = item->fingerprint;
          side["output"] = hex64(hash_path(item->job->out_path));
          side["record"] = to_json(r);
          write_text_atomically(sidecar_path(item->job->out_path), side.dump(2) + "\n");
        } catch (const std::exception& e) {
          fail(r, e);
        }
      }
      item->plan_dose_gy = Volume<float>();
      item->ct.reset();
      item->plan_frame_ct.reset();
      // A records file that cannot be written ends the batch after the queue
      // drains (the outputs already written stay valid); never terminate().
      try {
        emit(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(writer_error_mutex);
        if (!writer_error) writer_error = std::current_exception();
      }
    }
  });

  reader.join();
  for (auto& t : workers) t.join();
  to_write.close();
  for (auto& t : writers) t.join();
  if (writer_error) std::rethrow_exception(writer_error);

  for (const BatchJob& job : manifest.jobs)
    if (auto it = done.find(job.id); it != done.end()) summary.records.push_back(it->second);
  summary.wall_s = seconds_since(t_start);
  for (double s : idle_s) summary.compute_idle_s += s;
  summary.ct_loads = cache.loads();
  summary.ct_hits = cache.hits();
  summary.ct_evictions = cache.evictions();
  summary.ct_peak_bytes = cache.peak_cached_bytes();
  tally(summary);
  return summary;
}

BatchSummary merge_records(const Manifest& manifest, const std::vector<std::string>& record_files) {
  std::map<std::string, JobRecord> by_id;
  for (const std::string& path : record_files) {
    std::ifstream in(path);
    if (!in) throw IoError("cannot open the records file '" + path + "'");
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) lines.push_back(line);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      try {
        JobRecord r = job_record_from_json(json::parse(lines[i]));
        by_id[r.id] = r;
      } catch (const std::exception& e) {
        if (i + 1 == lines.size()) {
          spdlog::warn("{}: the last line is incomplete (an interrupted run); ignored", path);
          continue;
        }
        throw InputError(path + ", line " + std::to_string(i + 1) + ": not a job record: " + e.what());
      }
    }
  }
  BatchSummary s;
  s.manifest_path = manifest.path;
  for (const BatchJob& job : manifest.jobs) {
    auto it = by_id.find(job.id);
    if (it == by_id.end()) {
      JobRecord r;
      r.id = job.id;
      r.status = "missing";
      r.out_path = job.out_path;
      r.message = "no record in any shard's records file";
      s.records.push_back(r);
    } else {
      s.records.push_back(it->second);
    }
  }
  for (const auto& r : s.records) s.wall_s = std::max(s.wall_s, r.total_s);
  tally(s);
  s.jobs_per_s = 0;  // shards ran in parallel on other machines: no common wall clock
  return s;
}

std::string slurm_array_script(const std::string& executable, const std::string& manifest_path, int array_size,
                               int gpus_per_task, const std::string& report_dir, const std::string& batch_args) {
  if (array_size < 1) throw ConfigError("--array-size " + std::to_string(array_size) + ": need at least 1");
  if (gpus_per_task < 0) throw ConfigError("--gpus-per-task " + std::to_string(gpus_per_task) + " < 0");
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# protondose batch as a Slurm job array (docs/slurm.md): task K of N runs the\n"
    << "# jobs whose id hash is K mod N; afterwards `protondose batch MANIFEST --merge`.\n"
    << "#SBATCH --job-name=protondose-batch\n"
    << "#SBATCH --array=0-" << array_size - 1 << "\n"
    << "#SBATCH --ntasks=1\n";
  if (gpus_per_task > 0) s << "#SBATCH --gpus-per-task=" << gpus_per_task << "\n";
  s << "#SBATCH --output=" << report_dir << "/slurm-%A_%a.out\n"
    << "set -euo pipefail\n"
    << "exec '" << executable << "' batch '" << manifest_path << "' --report-dir '" << report_dir << "' \\\n"
    << "  --shard \"${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}\"" << (batch_args.empty() ? "" : " " + batch_args)
    << "\n";
  return s.str();
}

int workers_on_device(const std::vector<int>& gpu_devices, int workers, int device) {
  int n = 0;
  for (int w = 0; w < workers; ++w)
    if ((gpu_devices.empty() ? 0 : gpu_devices[static_cast<std::size_t>(w) % gpu_devices.size()]) == device) ++n;
  return n;
}

std::vector<int> parse_gpu_list(const std::string& text, int device_count) {
  std::vector<int> devices;
  if (text == "all") {
    if (device_count <= 0) throw UnavailableError("--gpus all: no usable CUDA device on this machine (or built without CUDA)");
    for (int d = 0; d < device_count; ++d) devices.push_back(d);
    return devices;
  }
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    std::size_t used = 0;
    int d = -1;
    try {
      d = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || d < 0)
      throw ConfigError("--gpus '" + text + "': expected 'all' or device indices like 0,1");
    if (d >= device_count)
      throw UnavailableError("--gpus '" + text + "': device " + std::to_string(d) + " does not exist (" +
                             std::to_string(device_count) + " usable CUDA device(s) here" +
                             (device_count == 0 ? ", or built without CUDA" : "") + ")");
    if (std::find(devices.begin(), devices.end(), d) != devices.end())
      throw ConfigError("--gpus '" + text + "': device " + std::to_string(d) + " is listed twice");
    devices.push_back(d);
  }
  if (devices.empty()) throw ConfigError("--gpus '" + text + "': expected 'all' or device indices like 0,1");
  return devices;
}

}  // namespace protondose::engine
