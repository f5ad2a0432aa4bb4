#pragma once
// Shared by the suites that run a built executable as a user would (the
// `protondose` command line, `batch`, the KS benchmark): one shell command,
// its exit status and what it printed on standard output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace protondose::testing {

struct CommandResult {
  int exit_code = -1;  ///< the command's exit status; −1 if it could not run or did not exit
  std::string out;     ///< its standard output (add "2>&1" to the command for standard error)
};

/// Runs `command` through the shell (its arguments already quoted).
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace protondose::testing
