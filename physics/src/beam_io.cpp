#include "beam_io.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::physics::detail {

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot open " + path.string() + " for reading");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  if (in.bad()) throw IoError("error while reading " + path.string());
  return lines;
}

std::string trim(const std::string& text) {
  const char* ws = " \t\r\n";
  const auto first = text.find_first_not_of(ws);
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(ws);
  return text.substr(first, last - first + 1);
}

namespace {
bool is_comment_or_blank(const std::string& line) {
  const std::string t = trim(line);
  return t.empty() || t[0] == '#';
}
}  // namespace

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) {
    std::string t = trim(cell);
    if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
    cells.push_back(t);
  }
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

bool parse_double(const std::string& text, double& value) {
  const std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || errno == ERANGE || !std::isfinite(v)) return false;
  value = v;
  return true;
}

std::string fmt(double value) {
  std::ostringstream out;
  out.precision(10);
  out << value;
  return out.str();
}

std::size_t CsvTable::column(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return i;
  std::string present;
  for (const auto& c : columns) present += (present.empty() ? "" : ", ") + c;
  throw DataError(file + ": missing column '" + name + "' (columns present: " + present + ")");
}

std::string CsvTable::where(std::size_t row, std::size_t col) const {
  return file + ": row " + std::to_string(row + 1) + " (line " + std::to_string(line_numbers[row]) +
         "), column " + (col < columns.size() ? columns[col] : std::to_string(col + 1));
}

double CsvTable::number(std::size_t row, std::size_t col) const {
  double v = 0.0;
  if (!parse_double(rows[row][col], v))
    throw DataError(where(row, col) + ": '" + rows[row][col] + "' is not a finite number");
  return v;
}

CsvTable read_csv(const std::filesystem::path& path) {
  const auto lines = read_lines(path);
  CsvTable table;
  table.file = path.string();
  std::size_t i = 0;
  while (i < lines.size() && is_comment_or_blank(lines[i])) ++i;
  if (i == lines.size()) throw DataError(table.file + ": no header line (the file is empty)");
  table.columns = split_csv_line(trim(lines[i]));
  for (++i; i < lines.size(); ++i) {
    if (is_comment_or_blank(lines[i])) continue;
    auto cells = split_csv_line(trim(lines[i]));
    if (cells.size() < table.columns.size())
      throw DataError(table.file + ": row " + std::to_string(table.rows.size() + 1) + " (line " +
                      std::to_string(i + 1) + ") has " + std::to_string(cells.size()) +
                      " cells, the header has " + std::to_string(table.columns.size()) + ": '" +
                      trim(lines[i]) + "'");
    table.rows.push_back(std::move(cells));
    table.line_numbers.push_back(i + 1);
  }
  return table;
}

const std::string& KeyValueFile::text(const std::string& key) const {
  const auto it = entries.find(key);
  if (it == entries.end()) throw DataError(file + ": missing key '" + key + "'");
  return it->second.first;
}

double KeyValueFile::number(const std::string& key) const {
  const std::string& t = text(key);
  double v = 0.0;
  if (!parse_double(t, v))
    throw DataError(file + ": line " + std::to_string(entries.at(key).second) + ", key " + key +
                    ": '" + t + "' is not a finite number");
  return v;
}

KeyValueFile read_key_value_file(const std::filesystem::path& path) {
  const auto lines = read_lines(path);
  KeyValueFile kv;
  kv.file = path.string();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (is_comment_or_blank(lines[i])) continue;
    const auto eq = lines[i].find('=');
    if (eq == std::string::npos)
      throw DataError(kv.file + ": line " + std::to_string(i + 1) + ": expected 'key = value', got '" +
                      trim(lines[i]) + "'");
    const std::string key = trim(lines[i].substr(0, eq));
    std::string value = trim(lines[i].substr(eq + 1));
    const auto hash = value.find(" #");
    if (hash != std::string::npos) value = trim(value.substr(0, hash));
    if (!kv.entries.emplace(key, std::make_pair(value, i + 1)).second)
      throw DataError(kv.file + ": line " + std::to_string(i + 1) + ": key '" + key +
                      "' repeated (first on line " + std::to_string(kv.entries.at(key).second) + ")");
  }
  return kv;
}

std::size_t note_once(const std::string& key, const std::string& message) {
  static std::mutex mutex;
  static std::map<std::string, std::size_t> counts;
  std::lock_guard<std::mutex> lock(mutex);
  const std::size_t n = ++counts[key];
  if (n == 1) std::clog << "protondose: note: " << message << '\n';
  return n;
}

}  // namespace protondose::physics::detail
