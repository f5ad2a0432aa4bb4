// The KS benchmark's command line refuses what it cannot do, with a typed
// error (exit code by category) and a message naming the option: it runs
// the built binary as a user would.
#include <gtest/gtest.h>

#include <string>

#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"
#include "run_command.h"

namespace protondose {
namespace {

/// The KS benchmark with `arguments`; its standard output and error.
testing::CommandResult run_ks_bench(const std::string& arguments) {
  return testing::run_command(std::string("'") + PROTONDOSE_KS_BENCH_EXE + "' " + arguments + " 2>&1");
}

TEST(KsBenchCommandLine, ProfileRadiusWithCpuOnlyIsAConfigError) {
  const testing::CommandResult r = run_ks_bench("--cpu-only --profile-radius 8");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kConfig)) << r.out;
  EXPECT_NE(r.out.find("[config] --profile-radius 8 runs GPU kernels; --cpu-only times the CPU oracle only"),
            std::string::npos)
      << r.out;
}

TEST(KsBenchCommandLine, ProfileRadiusWithoutADeviceIsUnavailable) {
  if (gpu_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: the profile would run";
  const testing::CommandResult r = run_ks_bench("--profile-radius 8");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kUnavailable)) << r.out;
  EXPECT_NE(r.out.find("--profile-radius 8 runs GPU kernels: no CUDA device (or built without CUDA)"),
            std::string::npos)
      << r.out;
}

TEST(KsBenchCommandLine, ProfileRadiusOutsideTheTileRadiiIsRefused) {
  const testing::CommandResult r = run_ks_bench("--profile-radius 33");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--profile-radius"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace protondose
