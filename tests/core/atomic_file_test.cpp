#include "protondose/core/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(PROTONDOSE_TEST_OUTPUT_DIR) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicFile, WritesContentsAndLeavesNoTemporary) {
  const fs::path dir = fresh_dir("atomic_ok");
  write_text_atomically((dir / "out.json").string(), "{\"a\": 1}\n");
  EXPECT_EQ(slurp(dir / "out.json"), "{\"a\": 1}\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
}

TEST(AtomicFile, FailedWriterLeavesOldFileIntactAndNoTemporary) {
  const fs::path dir = fresh_dir("atomic_fail");
  const std::string target = (dir / "dose.dcm").string();
  write_text_atomically(target, "old");
  EXPECT_THROW(write_file_atomically(target,
                                     [](const std::string& tmp) {
                                       std::ofstream(tmp) << "half-written";
                                       throw IoError("simulated disk full");
                                     }),
               IoError);
  EXPECT_EQ(slurp(target), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
}

TEST(AtomicFile, UnwritableFolderIsAnIoErrorNamingThePath) {
  try {
    write_text_atomically("/nonexistent-folder/x/out.txt", "x");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/x/out.txt"), std::string::npos);
  }
}

}  // namespace
}  // namespace protondose
