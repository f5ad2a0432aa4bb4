// The KS benchmark's command line refuses what it cannot do, with a typed
// error (exit code by category) and a message naming the option: it runs
// the built binary as a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"

namespace protondose {
namespace {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult run_ks_bench(const std::string& arguments) {
  CommandResult r;
  const std::string command = std::string("'") + PROTONDOSE_KS_BENCH_EXE + "' " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(KsBenchCommandLine, ProfileRadiusWithCpuOnlyIsAConfigError) {
  const CommandResult r = run_ks_bench("--cpu-only --profile-radius 8");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kConfig)) << r.output;
  EXPECT_NE(r.output.find("[config] --profile-radius 8 runs GPU kernels; --cpu-only times the CPU oracle only"),
            std::string::npos)
      << r.output;
}

TEST(KsBenchCommandLine, ProfileRadiusWithoutADeviceIsUnavailable) {
  if (gpu_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: the profile would run";
  const CommandResult r = run_ks_bench("--profile-radius 8");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kUnavailable)) << r.output;
  EXPECT_NE(r.output.find("--profile-radius 8 runs GPU kernels: no CUDA device (or built without CUDA)"),
            std::string::npos)
      << r.output;
}

TEST(KsBenchCommandLine, ProfileRadiusOutsideTheTileRadiiIsRefused) {
  const CommandResult r = run_ks_bench("--profile-radius 33");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--profile-radius"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace protondose
