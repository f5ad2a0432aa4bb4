// libFuzzer target: RT Ion Plan reader (strict and relaxed) on arbitrary bytes.
// Only protondose::Error may escape the reader; anything else (another
// exception, a sanitizer report, a hang, a leak) is a finding.
#include "fuzz_common.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ion_plan.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  protondose::dicom::fuzz::quiet_dcmtk();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace protondose::dicom;
  const std::string path = fuzz::scratch_dir() + "/plan.dcm";
  fuzz::write_input(path, data, size);
  try {
    (void)read_ion_plan(path);
  } catch (const protondose::Error&) {
  }
  try {
    IonPlanReadOptions relaxed;
    relaxed.drop_apertures = true;
    relaxed.allow_range_shifter_without_settings = true;
    (void)read_ion_plan_detailed(path, relaxed);
  } catch (const protondose::Error&) {
  }
  return 0;
}
