#pragma once
// Shared helpers for the dicom/ tests: paths of the shared data and a scratch
// folder per test under PROTONDOSE_TEST_OUTPUT_DIR.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace protondose::dicom::test {

inline std::string shared(const std::string& relative) {
  return std::string(PROTONDOSE_SHARED_DIR) + "/" + relative;
}

/// A fresh, empty folder for the current test.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/dicom/" +
                          info->test_suite_name() + "." + info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Runs `statement`, expects exception type E whose what() contains every
/// listed fragment.
#define EXPECT_THROW_WITH(statement, E, ...)                                          \
  do {                                                                                \
    bool caught_ = false;                                                             \
    try {                                                                             \
      statement;                                                                      \
    } catch (const E& e_) {                                                           \
      caught_ = true;                                                                 \
      const std::string what_ = e_.what();                                            \
      for (const char* fragment_ : {__VA_ARGS__})                                     \
        EXPECT_NE(what_.find(fragment_), std::string::npos)                           \
            << "message lacks '" << fragment_ << "': " << what_;                      \
    } catch (const std::exception& other_) {                                          \
      ADD_FAILURE() << "wrong exception type: " << other_.what();                     \
      caught_ = true;                                                                 \
    }                                                                                 \
    EXPECT_TRUE(caught_) << "no exception from " #statement;                          \
  } while (0)

}  // namespace protondose::dicom::test
