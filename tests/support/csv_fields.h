#pragma once
// Shared by the test suites that read the reference CSV tables of ../shared:
// one line split at commas (no quoting: those tables have none).
#include <sstream>
#include <string>
#include <vector>

namespace protondose::testing {

inline std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream s(line);
  std::string field;
  while (std::getline(s, field, ',')) out.push_back(field);
  return out;
}

}  // namespace protondose::testing
