#pragma once
/// \file beam_io.h
/// Private helpers of the beam half of physics/: strict CSV and key = value
/// readers whose errors name the file, row (line) and value, and a log-once
/// notice. Not installed; used by range_energy.cpp, depth_dose.cpp, beam_model.cpp.

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace protondose::physics::detail {

/// The lines of a text file. Throws IoError naming the path if it cannot be read.
std::vector<std::string> read_lines(const std::filesystem::path& path);

/// Whitespace (and a trailing '\r') removed from both ends.
std::string trim(const std::string& text);

/// A CSV table: one header line, then data rows. Lines whose first non-blank
/// character is '#' and blank lines are skipped everywhere. Cells are trimmed
/// and stripped of surrounding double quotes.
struct CsvTable {
  std::string file;                       ///< path, for messages
  std::vector<std::string> columns;       ///< header cells
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> line_numbers;  ///< 1-based file line of each row

  /// Index of the column named `name` (exact match). Throws DataError naming
  /// the file, the missing column and the columns present.
  std::size_t column(const std::string& name) const;
  /// The number in row `row` (0-based) of column `col`. Throws DataError
  /// naming file, row (1-based data row and file line), column and the text.
  double number(std::size_t row, std::size_t col) const;
  /// "<file>: row <r> (line <l>), column <name>" for messages.
  std::string where(std::size_t row, std::size_t col) const;
};

/// Splits a CSV line on commas (no quoted commas in our formats).
std::vector<std::string> split_csv_line(const std::string& line);

/// Reads a CSV file with a header line (the first non-comment line).
/// Throws IoError (unreadable) or DataError (no header, or a row with fewer
/// cells than the header, naming the row).
CsvTable read_csv(const std::filesystem::path& path);

/// Parses a whole trimmed string as a finite double; false if it is not one.
bool parse_double(const std::string& text, double& value);

/// "key = value" lines ('#' comments, blank lines skipped), key → (value, line).
struct KeyValueFile {
  std::string file;
  std::map<std::string, std::pair<std::string, std::size_t>> entries;

  bool has(const std::string& key) const { return entries.count(key) != 0; }
  /// The value of a required key. Throws DataError naming file and key.
  const std::string& text(const std::string& key) const;
  /// A required key as a finite number. Throws DataError naming file, line, key, value.
  double number(const std::string& key) const;
};

/// Reads a key = value file. Throws IoError, or DataError for a line without
/// '=' or a repeated key (naming the line).
KeyValueFile read_key_value_file(const std::filesystem::path& path);

/// Writes "protondose: note: <message>" to std::clog the first time `key` is
/// seen in this process (thread-safe); later calls with the same key are
/// counted, not printed. Returns how often `key` has been noted so far.
std::size_t note_once(const std::string& key, const std::string& message);

/// Number formatted with up to 10 significant digits (for messages).
std::string fmt(double value);

}  // namespace protondose::physics::detail
