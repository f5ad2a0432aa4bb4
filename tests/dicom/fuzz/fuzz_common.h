#pragma once
// Shared by the libFuzzer targets (built only by scripts/fuzz-dicom): the
// readers take paths, so each input is written to a per-process scratch file.
#include <dcmtk/config/osconfig.h>
#include <dcmtk/oflog/oflog.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace protondose::dicom::fuzz {

inline std::string scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("FUZZ_SCRATCH");
    std::string d = std::string(base ? base : "/tmp") + "/protondose-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_input(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// DCMTK logs every parse problem to stderr; the fuzzer's inputs are mostly
// broken, so silence it.
inline void quiet_dcmtk() { OFLog::configure(OFLogger::OFF_LOG_LEVEL); }

}  // namespace protondose::dicom::fuzz
