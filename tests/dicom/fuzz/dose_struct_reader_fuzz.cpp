// libFuzzer target: RT Dose and RT Structure Set readers, and rasterising
// every ROI that parses onto a small grid. Only protondose::Error may escape.
#include "fuzz_common.h"
#include "protondose/core/error.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  protondose::dicom::fuzz::quiet_dcmtk();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace protondose::dicom;
  const std::string path = fuzz::scratch_dir() + "/object.dcm";
  fuzz::write_input(path, data, size);
  try {
    (void)read_rt_dose(path);
  } catch (const protondose::Error&) {
  }
  try {
    const StructureSet set = read_rt_structure_set(path);
    protondose::Grid3 grid;
    grid.size = {32, 32, 16};
    grid.spacing_mm = {8, 8, 4};
    grid.origin_mm = {-124, -124, -30};
    for (const auto& roi : set.rois) {
      try {
        (void)rasterize_roi(set, roi.name, grid);
      } catch (const protondose::Error&) {
      }
    }
  } catch (const protondose::Error&) {
  }
  return 0;
}
