#include "protondose/core/error.h"

#include <gtest/gtest.h>

#include <set>

namespace protondose {
namespace {

TEST(Error, EachCategoryHasADistinctNonZeroExitCode) {
  const ErrorCategory all[] = {ErrorCategory::kInput,     ErrorCategory::kData,
                               ErrorCategory::kConfig,    ErrorCategory::kNumerical,
                               ErrorCategory::kCuda,      ErrorCategory::kUnavailable,
                               ErrorCategory::kIo,        ErrorCategory::kInternal};
  std::set<int> codes;
  std::set<std::string> names;
  for (ErrorCategory c : all) {
    const int code = exit_code(c);
    EXPECT_NE(code, 0);
    EXPECT_NE(code, 1) << "1 is reserved for failed checks (compare --require)";
    codes.insert(code);
    names.insert(category_name(c));
  }
  EXPECT_EQ(codes.size(), std::size(all));
  EXPECT_EQ(names.size(), std::size(all));
}

TEST(Error, SubclassesCarryTheirCategory) {
  try {
    throw DataError("machine.csv row 3: sigma_x_mm = -1");
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kData);
    EXPECT_STREQ(e.what(), "machine.csv row 3: sigma_x_mm = -1");
  }
  EXPECT_EQ(UnavailableError("x").category(), ErrorCategory::kUnavailable);
  EXPECT_EQ(CudaError("x").category(), ErrorCategory::kCuda);
  EXPECT_EQ(IoError("x").category(), ErrorCategory::kIo);
}

}  // namespace
}  // namespace protondose
