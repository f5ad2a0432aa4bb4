// Batch manifests (docs/formats/batch-manifest.md): JSON or CSV → jobs with
// resolved paths, validated as a whole so that a typo in job 900 fails before
// job 1 starts.
#include "protondose/engine/manifest.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "protondose/core/error.h"

namespace protondose::engine {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<std::string>& manifest_job_keys() {
  static const std::vector<std::string> keys{"id",       "ct",      "plan",     "out",     "structures",
                                             "reference_dose", "registration", "shift_mm", "rsp_scale",
                                             "grid_mm",  "backend", "machine",  "hu_curve"};
  return keys;
}

namespace {

bool is_job_key(const std::string& key) {
  const auto& keys = manifest_job_keys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string resolve(const std::string& folder, const std::string& p) {
  if (p.empty()) return p;
  fs::path path(p);
  if (path.is_relative()) path = fs::path(folder) / path;
  return path.lexically_normal().string();
}

/// "manifest.json, job 'x' (3)": where a problem is.
std::string where(const std::string& path, const std::string& id, int position, const char* unit = "job") {
  std::string s = path + ", " + unit + " " + std::to_string(position);
  if (!id.empty()) s += " (id '" + id + "')";
  return s;
}

const std::vector<std::string> kBackends{"cpu", "gpu", "gpu-gather"};

/// Assigns one key's value (already a JSON value: string, number, array) to the job.
void set_key(BatchJob& job, const std::string& key, const json& v, const std::string& at) {
  auto need_string = [&]() -> std::string {
    if (!v.is_string())
      throw InputError(at + ": key '" + key + "' must be a string, got " + v.dump());
    const std::string s = v.get<std::string>();
    if (s.empty()) throw InputError(at + ": key '" + key + "' is empty");
    return s;
  };
  auto need_number = [&]() -> double {
    if (!v.is_number()) throw InputError(at + ": key '" + key + "' must be a number, got " + v.dump());
    const double d = v.get<double>();
    if (!std::isfinite(d)) throw InputError(at + ": key '" + key + "' is not finite");
    return d;
  };
  if (key == "id") {
    job.id = need_string();
  } else if (key == "ct") {
    job.ct_dir = need_string();
  } else if (key == "plan") {
    job.plan_path = need_string();
  } else if (key == "out") {
    job.out_path = need_string();
  } else if (key == "structures") {
    job.structures_path = need_string();
  } else if (key == "reference_dose") {
    job.reference_dose_path = need_string();
  } else if (key == "registration") {
    job.registration_path = need_string();
  } else if (key == "machine") {
    job.machine = need_string();
  } else if (key == "hu_curve") {
    job.hu_curve = need_string();
  } else if (key == "backend") {
    job.backend = need_string();
    if (std::find(kBackends.begin(), kBackends.end(), job.backend) == kBackends.end())
      throw InputError(at + ": key 'backend' is '" + job.backend + "'; accepted: cpu, gpu, gpu-gather");
  } else if (key == "rsp_scale") {
    job.rsp_scale = need_number();
    if (!(job.rsp_scale >= 0.5 && job.rsp_scale <= 2.0))
      throw InputError(at + ": key 'rsp_scale' is " + v.dump() + "; accepted range [0.5, 2]");
  } else if (key == "grid_mm") {
    const double g = need_number();
    if (!(g > 0 && g <= 50)) throw InputError(at + ": key 'grid_mm' is " + v.dump() + " mm; accepted (0, 50] mm");
    job.grid_mm = g;
  } else if (key == "shift_mm") {
    if (!v.is_array() || v.size() != 3)
      throw InputError(at + ": key 'shift_mm' must be an array of 3 numbers [x, y, z] (mm), got " + v.dump());
    for (int a = 0; a < 3; ++a) {
      if (!v[a].is_number() || !std::isfinite(v[a].get<double>()))
        throw InputError(at + ": key 'shift_mm' must be an array of 3 numbers [x, y, z] (mm), got " + v.dump());
      job.shift_mm[a] = v[a].get<double>();
    }
  } else {
    throw InputError(at + ": unknown key '" + key + "'");
  }
}

void finish_job(BatchJob& job, const std::string& at, const std::string& folder) {
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"id", &job.id},
                                   {"ct", &job.ct_dir},
                                   {"plan", &job.plan_path},
                                   {"out", &job.out_path}})
    if (value->empty()) throw InputError(at + ": required key '" + key + "' is missing");
  job.ct_dir = resolve(folder, job.ct_dir);
  job.plan_path = resolve(folder, job.plan_path);
  job.out_path = resolve(folder, job.out_path);
  job.structures_path = resolve(folder, job.structures_path);
  job.reference_dose_path = resolve(folder, job.reference_dose_path);
  job.registration_path = resolve(folder, job.registration_path);
  // A machine or HU curve that names an existing file or folder is a path; a bare name is a shipped machine.
  if (!job.hu_curve.empty()) job.hu_curve = resolve(folder, job.hu_curve);
  if (!job.machine.empty() && (job.machine.find('/') != std::string::npos || fs::exists(fs::path(folder) / job.machine)))
    job.machine = resolve(folder, job.machine);
}

}  // namespace

Manifest parse_manifest_json(const std::string& text, const std::string& path, const std::string& folder) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  json jobs;
  json defaults = json::object();
  if (root.is_array()) {
    jobs = root;
  } else if (root.is_object()) {
    for (const auto& [k, v] : root.items())
      if (k != "jobs" && k != "defaults")
        throw InputError(path + ": unknown top-level key '" + k + "'; accepted: jobs, defaults");
    if (!root.contains("jobs") || !root["jobs"].is_array())
      throw InputError(path + ": top-level key 'jobs' must be an array of job objects");
    jobs = root["jobs"];
    if (root.contains("defaults")) {
      defaults = root["defaults"];
      if (!defaults.is_object()) throw InputError(path + ": key 'defaults' must be an object");
      for (const auto& [k, v] : defaults.items()) {
        if (k == "id" || k == "out")
          throw InputError(path + ", defaults: key '" + k + "' must be set per job, not in defaults");
        if (!is_job_key(k)) throw InputError(path + ", defaults: unknown key '" + k + "'");
      }
    }
  } else {
    throw InputError(path + ": a manifest is a JSON array of jobs or an object with 'jobs'");
  }
  if (jobs.empty()) throw InputError(path + ": the manifest has no jobs");

  Manifest m;
  m.path = path;
  m.folder = folder;
  int position = 0;
  for (const json& item : jobs) {
    ++position;
    std::string id = item.is_object() && item.contains("id") && item["id"].is_string() ? item["id"].get<std::string>() : "";
    const std::string at = where(path, id, position);
    if (!item.is_object()) throw InputError(at + ": a job must be a JSON object, got " + item.dump());
    BatchJob job;
    job.position = position;
    for (const auto& [k, v] : defaults.items()) set_key(job, k, v, where(path, id, position) + " (from defaults)");
    for (const auto& [k, v] : item.items()) set_key(job, k, v, at);
    finish_job(job, at, folder);
    m.jobs.push_back(std::move(job));
  }
  return m;
}

namespace {

/// Splits one CSV line into fields (RFC 4180 quotes, no embedded newlines).
std::vector<std::string> split_csv_line(const std::string& line, const std::string& at) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw InputError(at + ": unterminated quoted field");
  fields.push_back(cur);
  for (auto& f : fields) {
    const auto b = f.find_first_not_of(" \t");
    const auto e = f.find_last_not_of(" \t");
    f = b == std::string::npos ? "" : f.substr(b, e - b + 1);
  }
  return fields;
}

json csv_number(const std::string& text, const std::string& key, const std::string& at) {
  std::size_t used = 0;
  double d = 0;
  try {
    d = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || used == 0) throw InputError(at + ": key '" + key + "' must be a number, got '" + text + "'");
  return d;
}

}  // namespace

Manifest parse_manifest_csv(const std::string& text, const std::string& path, const std::string& folder) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  std::vector<std::string> header;
  Manifest m;
  m.path = path;
  m.folder = folder;
  int position = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    const std::string line_at = path + ", line " + std::to_string(line_no);
    std::vector<std::string> fields = split_csv_line(line, line_at);
    if (header.empty()) {
      std::set<std::string> seen;
      for (const auto& h : fields) {
        if (!is_job_key(h)) throw InputError(line_at + ": unknown column '" + h + "' in the header");
        if (!seen.insert(h).second) throw InputError(line_at + ": column '" + h + "' appears twice in the header");
      }
      header = fields;
      continue;
    }
    ++position;
    if (fields.size() != header.size())
      throw InputError(line_at + ": " + std::to_string(fields.size()) + " fields, the header has " +
                       std::to_string(header.size()));
    std::string id;
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c] == "id") id = fields[c];
    const std::string at = where(path, id, line_no, "line");
    BatchJob job;
    job.position = line_no;
    for (std::size_t c = 0; c < header.size(); ++c) {
      const std::string& key = header[c];
      const std::string& cell = fields[c];
      if (cell.empty()) continue;
      json v;
      if (key == "rsp_scale" || key == "grid_mm") {
        v = csv_number(cell, key, at);
      } else if (key == "shift_mm") {
        std::string s = cell;
        std::replace(s.begin(), s.end(), ';', ' ');
        std::istringstream parts(s);
        std::string part;
        v = json::array();
        while (parts >> part) v.push_back(csv_number(part, key, at));
        if (v.size() != 3)
          throw InputError(at + ": key 'shift_mm' must be three numbers 'x;y;z' (mm), got '" + cell + "'");
      } else {
        v = cell;
      }
      set_key(job, key, v, at);
    }
    finish_job(job, at, folder);
    m.jobs.push_back(std::move(job));
  }
  if (header.empty()) throw InputError(path + ": no header line");
  if (m.jobs.empty()) throw InputError(path + ": the manifest has no jobs");
  return m;
}

void validate_manifest(const Manifest& m) {
  std::vector<std::string> problems;
  std::map<std::string, const BatchJob*> by_id;
  std::map<std::string, const BatchJob*> by_out;
  std::set<std::string> inputs;
  for (const BatchJob& j : m.jobs) {
    inputs.insert(j.plan_path);
    if (!j.reference_dose_path.empty()) inputs.insert(j.reference_dose_path);
    if (!j.structures_path.empty()) inputs.insert(j.structures_path);
    if (!j.registration_path.empty()) inputs.insert(j.registration_path);
  }
  auto job_at = [&](const BatchJob& j) { return "job '" + j.id + "' (" + std::to_string(j.position) + ")"; };
  for (const BatchJob& j : m.jobs) {
    if (auto [it, fresh] = by_id.emplace(j.id, &j); !fresh)
      problems.push_back(job_at(j) + ": key 'id': duplicate of job " + std::to_string(it->second->position));
    if (auto [it, fresh] = by_out.emplace(j.out_path, &j); !fresh)
      problems.push_back(job_at(j) + ": key 'out': '" + j.out_path + "' is also the output of job '" +
                         it->second->id + "'");
    if (inputs.count(j.out_path))
      problems.push_back(job_at(j) + ": key 'out': '" + j.out_path + "' is an input of the batch");
    if (!fs::is_directory(j.ct_dir)) problems.push_back(job_at(j) + ": key 'ct': no such folder '" + j.ct_dir + "'");
    auto need_file = [&](const char* key, const std::string& p) {
      if (!p.empty() && !fs::is_regular_file(p))
        problems.push_back(job_at(j) + ": key '" + key + "': no such file '" + p + "'");
    };
    need_file("plan", j.plan_path);
    need_file("structures", j.structures_path);
    need_file("reference_dose", j.reference_dose_path);
    need_file("hu_curve", j.hu_curve);
    need_file("registration", j.registration_path);
    const fs::path out_dir = fs::path(j.out_path).parent_path();
    if (!out_dir.empty() && !fs::is_directory(out_dir))
      problems.push_back(job_at(j) + ": key 'out': the folder '" + out_dir.string() + "' does not exist");
  }
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    const std::size_t shown = std::min<std::size_t>(v.size(), 20);
    for (std::size_t i = 0; i < shown; ++i) s += "\n  " + v[i];
    if (v.size() > shown) s += "\n  ... and " + std::to_string(v.size() - shown) + " more";
    return s;
  };
  if (!problems.empty())
    throw InputError(m.path + ": " + std::to_string(problems.size()) + " problem(s) in the manifest:" +
                     joined(problems));
}

Manifest load_manifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open the manifest '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const fs::path p = fs::absolute(path);
  const std::string folder = p.parent_path().string();
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  Manifest m;
  if (ext == ".json") {
    m = parse_manifest_json(ss.str(), path, folder);
  } else if (ext == ".csv") {
    m = parse_manifest_csv(ss.str(), path, folder);
  } else {
    throw InputError(path + ": a manifest must be .json or .csv, got '" + ext + "'");
  }
  validate_manifest(m);
  return m;
}

}  // namespace protondose::engine
