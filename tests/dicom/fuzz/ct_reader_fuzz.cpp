// libFuzzer target: CT series reader on a folder holding one arbitrary file
// (a one-slice series when it parses). Only protondose::Error may escape.
#include "fuzz_common.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  protondose::dicom::fuzz::quiet_dcmtk();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace protondose::dicom;
  const std::string dir = fuzz::scratch_dir() + "/ct";
  std::filesystem::create_directories(dir);
  fuzz::write_input(dir + "/slice.dcm", data, size);
  try {
    (void)read_ct_series(dir);
  } catch (const protondose::Error&) {
  }
  return 0;
}
