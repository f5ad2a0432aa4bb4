// The KS benchmark's command line (and the mma-ceiling benchmark's) refuses
// what it cannot do, with a typed error (exit code by category) and a
// message naming the option: it runs the built binary as a user would.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"
#include "run_command.h"

namespace protondose {
namespace {

/// The KS benchmark with `arguments`; its standard output and error.
testing::CommandResult run_ks_bench(const std::string& arguments) {
  return testing::run_command(std::string("'") + PROTONDOSE_KS_BENCH_EXE + "' " + arguments + " 2>&1");
}

/// The KS benchmark with `arguments` exits with `category`'s code and prints `message`.
void expect_refused(const std::string& arguments, ErrorCategory category, const std::string& message) {
  const testing::CommandResult r = run_ks_bench(arguments);
  EXPECT_EQ(r.exit_code, exit_code(category)) << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
}

TEST(KsBenchCommandLine, ProfileRadiusWithCpuOnlyIsAConfigError) {
  expect_refused("--cpu-only --profile-radius 8", ErrorCategory::kConfig,
                 "[config] --profile-radius 8 runs GPU kernels; --cpu-only times the CPU oracle only");
}

TEST(KsBenchCommandLine, ProfileRadiusWithoutADeviceIsUnavailable) {
  if (gpu_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: the profile would run";
  expect_refused("--profile-radius 8", ErrorCategory::kUnavailable,
                 "--profile-radius 8 runs GPU kernels: no CUDA device (or built without CUDA)");
}

TEST(KsBenchCommandLine, ProfileRadiusOutsideTheTileRadiiIsRefused) {
  const testing::CommandResult r = run_ks_bench("--profile-radius 33");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--profile-radius"), std::string::npos) << r.out;
}

TEST(KsBenchCommandLine, SectionDCasesOutsideTheTileRadiiAreRefused) {
  // Before any case runs: the message names the option.
  const std::pair<const char*, const char*> cases[] = {{"--sections D --d-radii 4,33", "--d-radii"},
                                                       {"--sections D --d-fixed 0", "--d-fixed"}};
  for (const auto& [arguments, option] : cases) {
    const testing::CommandResult r = run_ks_bench(arguments);
    EXPECT_NE(r.exit_code, 0) << arguments << "\n" << r.out;
    EXPECT_NE(r.out.find(option), std::string::npos) << arguments << "\n" << r.out;
  }
}

#ifdef PROTONDOSE_MMA_CEILING_EXE
// protondose-mma-ceiling (CUDA builds): without a device it refuses as
// unavailable, with its exit code, instead of failing inside a CUDA call.
TEST(MmaCeilingCommandLine, WithoutADeviceIsUnavailable) {
  if (gpu_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: the benchmark would run";
  const testing::CommandResult r =
      testing::run_command(std::string("'") + PROTONDOSE_MMA_CEILING_EXE + "' 2>&1");
  EXPECT_EQ(r.exit_code, exit_code(ErrorCategory::kUnavailable)) << r.out;
  EXPECT_NE(r.out.find("[unavailable] protondose-mma-ceiling times the tensor cores: no CUDA device"),
            std::string::npos)
      << r.out;
}
#endif

}  // namespace
}  // namespace protondose
