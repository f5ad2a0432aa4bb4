// Bad input: each test takes a real file, changes one element with DCMTK,
// saves it under PROTONDOSE_TEST_OUTPUT_DIR and checks the exception type and
// that the message names the file, the tag (keyword and (gggg,eeee)), and the
// beam and control point where they apply.
#include <dcmtk/config/osconfig.h>
#include <dcmtk/dcmdata/dctk.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"

namespace protondose::dicom {
namespace {

using test::shared;

// Loads `in`, lets `change` edit the dataset, saves to `out` (same transfer syntax).
void modify(const std::string& in, const std::string& out, const std::function<void(DcmDataset&)>& change) {
  DcmFileFormat file;
  ASSERT_TRUE(file.loadFile(in.c_str()).good()) << in;
  ASSERT_TRUE(file.loadAllDataIntoMemory().good());
  change(*file.getDataset());
  const OFCondition status = file.saveFile(out.c_str(), file.getDataset()->getOriginalXfer());
  ASSERT_TRUE(status.good()) << status.text();
}

DcmItem& item_of(DcmItem& parent, const DcmTagKey& sequence, int index) {
  DcmItem* item = nullptr;
  EXPECT_TRUE(parent.findAndGetSequenceItem(sequence, item, index).good());
  return *item;
}

DcmItem& beam(DcmDataset& ds, int b) { return item_of(ds, DCM_IonBeamSequence, b); }
DcmItem& control_point(DcmDataset& ds, int b, int c) { return item_of(beam(ds, b), DCM_IonControlPointSequence, c); }

void set(DcmItem& item, const DcmTagKey& key, const char* value) {
  ASSERT_TRUE(item.putAndInsertString(key, value).good());
}

// The slab reference plan: one beam 'G000', control points 0 (150 MeV, 121
// spots of weight 2), 1 (zeros), 2 (120 MeV, 121 × 2), 3 (zeros).
const std::string kSlabPlan = "reference/slab_dcpt/plan.dcm";

std::string modified_plan(const std::function<void(DcmDataset&)>& change) {
  const std::string out = test::scratch_dir() + "/plan.dcm";
  modify(shared(kSlabPlan), out, change);
  return out;
}

TEST(IonPlanReader, MergesControlPointPairsThatRepeatAnEnergyIntoOneLayer) {
  // Slab plan with the 120 MeV pair relabelled 150 MeV: one layer of 242 spots.
  const std::string path = modified_plan([](DcmDataset& ds) {
    set(control_point(ds, 0, 2), DCM_NominalBeamEnergy, "150");
    set(control_point(ds, 0, 3), DCM_NominalBeamEnergy, "150");
  });
  const IonPlan plan = read_ion_plan(path);
  ASSERT_EQ(plan.beams.at(0).layers.size(), 1u);
  EXPECT_EQ(plan.beams[0].layers[0].spots.size(), 242u);
  EXPECT_EQ(plan.beams[0].layers[0].control_point_index, 0);
  EXPECT_NEAR(plan.beams[0].total_meterset(), 484.0, 1e-9);
}

TEST(IonPlanReader, SkipsSetupBeams) {
  // plan03 with beam 2 turned into a setup field: only beam 1 is read.
  const std::string out = test::scratch_dir() + "/plan.dcm";
  modify(shared("data/ion-plans/dcpt/plan03_ramp_full/ramped_2Gy_ver2_full.dcm"), out,
         [](DcmDataset& ds) { set(beam(ds, 1), DCM_TreatmentDeliveryType, "SETUP"); });
  const auto result = read_ion_plan_detailed(out);
  ASSERT_EQ(result.plan.beams.size(), 1u);
  EXPECT_EQ(result.plan.beams[0].number, 1);
  EXPECT_EQ(result.setup_beams_skipped, std::vector<int>{2});
}

TEST(IonPlanReader, RejectsAPlanWithOnlySetupBeams) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_TreatmentDeliveryType, "SETUP"); });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "only SETUP beams", "TreatmentDeliveryType (300a,00ce)");
}

TEST(IonPlanReader, RejectsSpotWeightCountMismatch) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    DcmItem& cp = control_point(ds, 0, 2);
    const Float32* weights = nullptr;
    unsigned long n = 0;
    ASSERT_TRUE(cp.findAndGetFloat32Array(DCM_ScanSpotMetersetWeights, weights, &n).good());
    std::vector<Float32> fewer(weights, weights + n - 1);
    ASSERT_TRUE(cp.putAndInsertFloat32Array(DCM_ScanSpotMetersetWeights, fewer.data(), n - 1).good());
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, path.c_str(), "beam 1 'G000'", "control point 2",
                    "ScanSpotMetersetWeights (300a,0396)", "120 weights",
                    "NumberOfScanSpotPositions (300a,0392) is 121");
}

TEST(IonPlanReader, RejectsSpotPositionCountMismatch) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    DcmItem& cp = control_point(ds, 0, 0);
    set(cp, DCM_NumberOfScanSpotPositions, "120");
    const Float32* weights = nullptr;
    unsigned long n = 0;
    ASSERT_TRUE(cp.findAndGetFloat32Array(DCM_ScanSpotMetersetWeights, weights, &n).good());
    std::vector<Float32> fewer(weights, weights + n - 1);
    ASSERT_TRUE(cp.putAndInsertFloat32Array(DCM_ScanSpotMetersetWeights, fewer.data(), n - 1).good());
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "control point 0", "ScanSpotPositionMap (300a,0394)",
                    "242 values for 120 spot weights");
}

TEST(IonPlanReader, RejectsNegativeSpotWeight) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    DcmItem& cp = control_point(ds, 0, 0);
    DcmElement* element = nullptr;
    ASSERT_TRUE(cp.findAndGetElement(DCM_ScanSpotMetersetWeights, element).good());
    ASSERT_TRUE(element->putFloat32(-2.0F, 5).good());
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "control point 0", "ScanSpotMetersetWeights (300a,0396)",
                    "spot 5 has weight -2");
}

TEST(IonPlanReader, RejectsZeroBeamMeterset) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    DcmItem& fg = item_of(ds, DCM_FractionGroupSequence, 0);
    set(item_of(fg, DCM_ReferencedBeamSequence, 0), DCM_BeamMeterset, "0");
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, path.c_str(), "beam 1 'G000'", "BeamMeterset (300a,0086)",
                    "is 0 MU; must be > 0");
}

TEST(IonPlanReader, RejectsNegativeFinalCumulativeMetersetWeight) {
  const std::string path =
      modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_FinalCumulativeMetersetWeight, "-484"); });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "beam 1 'G000'",
                    "FinalCumulativeMetersetWeight (300a,010e)", "-484; must be > 0");
}

TEST(IonPlanReader, RejectsWeightsThatDoNotSumToTheFinalCumulativeMetersetWeight) {
  const std::string path =
      modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_FinalCumulativeMetersetWeight, "500"); });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "FinalCumulativeMetersetWeight (300a,010e)",
                    "spot weights sum to 484");
}

TEST(IonPlanReader, RejectsMissingEnergy) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    ASSERT_TRUE(control_point(ds, 0, 0).findAndDeleteElement(DCM_NominalBeamEnergy).good());
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "beam 1 'G000'", "control point 0",
                    "NominalBeamEnergy (300a,0114)", "missing");
}

TEST(IonPlanReader, RejectsMalformedDecimalString) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    set(control_point(ds, 0, 2), DCM_NominalBeamEnergy, "12O.5");
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "control point 2", "NominalBeamEnergy (300a,0114)",
                    "not a valid number");
}

TEST(IonPlanReader, RejectsMissingIsocenter) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    ASSERT_TRUE(control_point(ds, 0, 0).findAndDeleteElement(DCM_IsocenterPosition).good());
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "control point 0", "IsocenterPosition (300a,012c)",
                    "required element is missing");
}

TEST(IonPlanReader, RejectsControlPointCountMismatch) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_NumberOfControlPoints, "5"); });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "NumberOfControlPoints (300a,0110)", "states 5",
                    "has 4 items");
}

TEST(IonPlanReader, RejectsABeamWithOnlyZeroWeights) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    for (int c : {0, 2}) {
      DcmItem& cp = control_point(ds, 0, c);
      std::vector<Float32> zeros(121, 0.0F);
      ASSERT_TRUE(cp.putAndInsertFloat32Array(DCM_ScanSpotMetersetWeights, zeros.data(), 121).good());
    }
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "beam 1 'G000'", "ScanSpotMetersetWeights (300a,0396)",
                    "delivers no meterset");
}

TEST(IonPlanReader, RejectsABeamMissingFromTheFractionGroup) {
  const std::string path = modified_plan([](DcmDataset& ds) {
    DcmItem& fg = item_of(ds, DCM_FractionGroupSequence, 0);
    set(item_of(fg, DCM_ReferencedBeamSequence, 0), DCM_ReferencedBeamNumber, "9");
  });
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, "beam 1 'G000'", "ReferencedBeamNumber (300c,0006)",
                    "BeamMeterset is unknown");
}

TEST(IonPlanReader, RejectsLineScanningAsUnavailable) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_ScanMode, "LINE"); });
  EXPECT_THROW_WITH(read_ion_plan(path), UnavailableError, "beam 1 'G000'", "ScanMode LINE");
}

TEST(IonPlanReader, RejectsUniformScanningAsUnavailable) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_ScanMode, "UNIFORM"); });
  EXPECT_THROW_WITH(read_ion_plan(path), UnavailableError, "beam 1 'G000'", "ScanMode UNIFORM");
}

TEST(IonPlanReader, RejectsCarbonIonsAsUnavailable) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_RadiationType, "ION"); });
  EXPECT_THROW_WITH(read_ion_plan(path), UnavailableError, "beam 1 'G000'", "RadiationType ION");
}

TEST(IonPlanReader, RejectsCompensatorAsUnavailable) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_NumberOfCompensators, "1"); });
  EXPECT_THROW_WITH(read_ion_plan(path), UnavailableError, "beam 1 'G000'", "range compensator");
}

TEST(IonPlanReader, RejectsApertureAsUnavailable) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(beam(ds, 0), DCM_NumberOfBlocks, "1"); });
  EXPECT_THROW_WITH(read_ion_plan(path), UnavailableError, "beam 1 'G000'", "aperture");
}

TEST(IonPlanReader, RejectsArcAsUnavailable) {
  const std::string path = modified_plan([](DcmDataset& ds) { set(control_point(ds, 0, 2), DCM_GantryAngle, "10"); });
  EXPECT_THROW_WITH(read_ion_plan(path), UnavailableError, "beam 1 'G000'", "control point 2", "arc",
                    "GantryAngle (300a,011e)");
}

TEST(IonPlanReader, RejectsInsertedRangeShifterWithoutWaterEquivalentThickness) {
  const std::string out = test::scratch_dir() + "/plan.dcm";
  modify(shared("data/ion-plans/dcpt/plan06_sobp_4d/RP1.2.752.243.1.1.20260105182345801.4870.23686.dcm"), out,
         [](DcmDataset& ds) {
           DcmItem& setting = item_of(control_point(ds, 0, 0), DCM_RangeShifterSettingsSequence, 0);
           ASSERT_TRUE(setting.findAndDeleteElement(DCM_RangeShifterWaterEquivalentThickness).good());
         });
  EXPECT_THROW_WITH(read_ion_plan(out), InputError, "beam 1 '4_SOBP_2Gy'", "control point 0",
                    "RangeShifterWaterEquivalentThickness (300a,0366)", "RS_3CM");
}

TEST(IonPlanReader, RejectsDuplicateBeamNumbers) {
  const std::string out = test::scratch_dir() + "/plan.dcm";
  modify(shared("data/ion-plans/dcpt/plan03_ramp_full/ramped_2Gy_ver2_full.dcm"), out,
         [](DcmDataset& ds) { set(beam(ds, 1), DCM_BeamNumber, "1"); });
  EXPECT_THROW_WITH(read_ion_plan(out), InputError, "BeamNumber (300a,00c0)", "appears twice");
}

TEST(IonPlanReader, RejectsACtSliceAsNotAnIonPlan) {
  const std::string path = shared("reference/slab_dcpt/ct/CT.slab_dcpt.001.dcm");
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, path.c_str(), "not an RT Ion Plan",
                    "SOPClassUID (0008,0016)");
}

TEST(IonPlanReader, RejectsAMissingFileAsIoError) {
  EXPECT_THROW_WITH(read_ion_plan("/nonexistent/plan.dcm"), IoError, "/nonexistent/plan.dcm");
}

TEST(IonPlanReader, RejectsATextFile) {
  const std::string path = test::scratch_dir() + "/notes.dcm";
  std::ofstream(path) << "this is not DICOM\n";
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, path.c_str(), "not a readable DICOM file");
}

TEST(IonPlanReader, RejectsATruncatedFile) {
  const std::string path = test::scratch_dir() + "/truncated.dcm";
  std::filesystem::copy_file(shared(kSlabPlan), path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  EXPECT_THROW_WITH(read_ion_plan(path), InputError, path.c_str());
}

TEST(FrameOfReference, RejectsCtAndPlanInDifferentFrames) {
  const IonPlan plan = read_ion_plan(shared(kSlabPlan));
  CtImage ct;
  ct.frame_of_reference_uid = "1.2.3.4";
  ct.series_instance_uid = "1.2.3.5";
  EXPECT_THROW_WITH(check_same_frame_of_reference(ct, plan), InputError, "1.2.3.4",
                    "2.25.191645871060748269088958807794064710561", "FrameOfReferenceUID (0020,0052)");
  ct.frame_of_reference_uid = plan.frame_of_reference_uid;
  EXPECT_NO_THROW(check_same_frame_of_reference(ct, plan));
}

// ---- CT series -------------------------------------------------------------

// A small synthetic series (write_ct_series), 6 slices of 8 × 6 at 2 mm.
std::string small_series(const std::string& dir) {
  CtImage ct;
  Grid3 g;
  g.size = {8, 6, 6};
  g.spacing_mm = {1.0, 1.0, 2.0};
  g.origin_mm = {0, 0, 0};
  ct.hu = Volume<float>(g, 0.0F);
  ct.frame_of_reference_uid = "1.2.826.0.1.3680043.2.1125.1";
  write_ct_series(ct, dir);
  return dir;
}

std::string slice(const std::string& dir, int n) {
  char name[32];
  std::snprintf(name, sizeof name, "/CT.%04d.dcm", n);
  return dir + name;
}

void modify_in_place(const std::string& path, const std::function<void(DcmDataset&)>& change) {
  const std::string tmp = path + ".new";
  modify(path, tmp, change);
  std::filesystem::rename(tmp, path);
}

TEST(CtSeriesReader, RejectsDuplicateSlicePositions) {
  const std::string dir = small_series(test::scratch_dir());
  modify_in_place(slice(dir, 4), [](DcmDataset& ds) { set(ds, DCM_ImagePositionPatient, "0\\0\\4"); });
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "duplicate slice position 4 mm", "CT.0003.dcm",
                    "CT.0004.dcm", "ImagePositionPatient (0020,0032)");
}

TEST(CtSeriesReader, RejectsNonUniformSliceSpacing) {
  const std::string dir = small_series(test::scratch_dir());
  std::filesystem::remove(slice(dir, 3));
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "non-uniform slice spacing", "4 mm between",
                    "CT.0002.dcm", "CT.0004.dcm", "ImagePositionPatient (0020,0032)");
}

TEST(CtSeriesReader, RejectsInconsistentPixelSpacing) {
  const std::string dir = small_series(test::scratch_dir());
  modify_in_place(slice(dir, 5), [](DcmDataset& ds) { set(ds, DCM_PixelSpacing, "1.2\\1.2"); });
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "CT.0005.dcm", "PixelSpacing (0028,0030)",
                    "all slices of a series must agree");
}

TEST(CtSeriesReader, RejectsInconsistentFrameOfReference) {
  const std::string dir = small_series(test::scratch_dir());
  modify_in_place(slice(dir, 2), [](DcmDataset& ds) { set(ds, DCM_FrameOfReferenceUID, "1.2.3"); });
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "CT.0002.dcm", "FrameOfReferenceUID (0020,0052)", "'1.2.3'");
}

TEST(CtSeriesReader, RejectsObliqueOrientationAsUnavailable) {
  const std::string dir = small_series(test::scratch_dir());
  for (int n = 1; n <= 6; ++n)
    modify_in_place(slice(dir, n), [](DcmDataset& ds) {
      set(ds, DCM_ImageOrientationPatient, "0.996194698\\0.087155743\\0\\-0.087155743\\0.996194698\\0");
    });
  EXPECT_THROW_WITH(read_ct_series(dir), UnavailableError, "oblique", "ImageOrientationPatient (0020,0037)");
}

TEST(CtSeriesReader, RejectsGantryTiltAsUnavailable) {
  const std::string dir = small_series(test::scratch_dir());
  modify_in_place(slice(dir, 1), [](DcmDataset& ds) { set(ds, DCM_GantryDetectorTilt, "15"); });
  EXPECT_THROW_WITH(read_ct_series(dir), UnavailableError, "CT.0001.dcm", "GantryDetectorTilt (0018,1120)",
                    "gantry-tilted");
}

TEST(CtSeriesReader, RejectsShearedSlicePositionsAsUnavailable) {
  // A tilted acquisition without GantryDetectorTilt: slice origins drift in y.
  const std::string dir = small_series(test::scratch_dir());
  for (int n = 1; n <= 6; ++n)
    modify_in_place(slice(dir, n), [n](DcmDataset& ds) {
      const std::string ipp = "0\\" + std::to_string(0.5 * (n - 1)) + "\\" + std::to_string(2 * (n - 1));
      set(ds, DCM_ImagePositionPatient, ipp.c_str());
    });
  EXPECT_THROW_WITH(read_ct_series(dir), UnavailableError, "not on the slice normal", "gantry-tilted");
}

TEST(CtSeriesReader, RejectsTruncatedPixelData) {
  const std::string dir = small_series(test::scratch_dir());
  std::filesystem::resize_file(slice(dir, 3), std::filesystem::file_size(slice(dir, 3)) - 10);
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "CT.0003.dcm");
}

TEST(CtSeriesReader, RejectsMissingRescaleSlope) {
  const std::string dir = small_series(test::scratch_dir());
  modify_in_place(slice(dir, 6), [](DcmDataset& ds) { ASSERT_TRUE(ds.findAndDeleteElement(DCM_RescaleSlope).good()); });
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "CT.0006.dcm", "RescaleSlope (0028,1053)", "missing");
}

TEST(CtSeriesReader, ReportsPixelPaddingValueInHounsfieldUnits) {
  // int16 series with two voxels at −3024 HU, marked as padding; once as SS
  // and once as the US bit pattern (62512) that implicit-VR files produce.
  for (bool as_unsigned : {false, true}) {
    SCOPED_TRACE(as_unsigned ? "US 62512" : "SS -3024");
    CtImage ct;
    Grid3 g;
    g.size = {4, 3, 2};
    ct.hu = Volume<float>(g, 0.0F);
    ct.hu.at(0, 0, 0) = -3024.0F;
    ct.hu.at(3, 2, 1) = -3024.0F;
    const std::string dir = test::scratch_dir() + (as_unsigned ? "/us" : "/ss");
    write_ct_series(ct, dir);
    for (int n = 1; n <= 2; ++n)
      modify_in_place(slice(dir, n), [as_unsigned](DcmDataset& ds) {
        if (as_unsigned) {
          ASSERT_TRUE(ds.putAndInsertUint16(DCM_PixelPaddingValue, 62512).good());
        } else {
          DcmElement* e = new DcmSignedShort(DcmTag(DCM_PixelPaddingValue, EVR_SS));
          ASSERT_TRUE(e->putSint16(-3024).good());
          ASSERT_TRUE(ds.insert(e, OFTrue).good());
        }
      });
    const CtSeriesReadResult result = read_ct_series_detailed(dir);
    ASSERT_TRUE(result.padding_hu.has_value());
    EXPECT_EQ(*result.padding_hu, -3024.0F);
    EXPECT_EQ(result.padding_voxels, 2u);
    EXPECT_EQ(result.ct.hu.at(3, 2, 1), -3024.0F);  // left as stored: the caller decides
    EXPECT_EQ(result.slice_files.size(), 2u);
  }
}

TEST(CtSeriesReader, ListsTheSeriesWhenAFolderHoldsSeveralAndPicksOneByUid) {
  const std::string dir = small_series(test::scratch_dir());
  // A second series: two copies with another SeriesInstanceUID.
  for (int n : {1, 2})
    modify(slice(dir, n), dir + "/other" + std::to_string(n) + ".dcm", [](DcmDataset& ds) {
      set(ds, DCM_SeriesInstanceUID, "1.2.826.0.1.3680043.2.1125.99");
    });
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "holds 2 CT series", "1.2.826.0.1.3680043.2.1125.99 (2 slices)",
                    "(6 slices)", "SeriesInstanceUID (0020,000e)");
  EXPECT_EQ(read_ct_series(dir, "1.2.826.0.1.3680043.2.1125.99").hu.grid.size[2], 2);
  EXPECT_THROW_WITH(read_ct_series(dir, "9.9"), InputError, "no series with SeriesInstanceUID", "'9.9'");
}

// ---- RT Dose --------------------------------------------------------------

TEST(RtDoseReader, AcceptsAbsoluteGridFrameOffsets) {
  const std::string dir = test::scratch_dir();
  // RayStation file: IPP z = −94.25, offsets 0\3\6\9\12 → absolute −94.25 … −82.25.
  modify(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"), dir + "/abs.dcm", [](DcmDataset& ds) {
    set(ds, DCM_GridFrameOffsetVector, "-94.25\\-91.25\\-88.25\\-85.25\\-82.25");
  });
  const RtDose relative = read_rt_dose(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"));
  const RtDose absolute = read_rt_dose(dir + "/abs.dcm");
  EXPECT_EQ(absolute.dose_gy.grid, relative.dose_gy.grid);
  EXPECT_EQ(absolute.dose_gy.data, relative.dose_gy.data);
}

TEST(RtDoseReader, RejectsNonUniformGridFrameOffsets) {
  const std::string path = test::scratch_dir() + "/dose.dcm";
  modify(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"), path,
         [](DcmDataset& ds) { set(ds, DCM_GridFrameOffsetVector, "0\\3\\6\\10\\12"); });
  EXPECT_THROW_WITH(read_rt_dose(path), InputError, path.c_str(), "GridFrameOffsetVector (3004,000c)",
                    "non-uniform frame spacing");
}

TEST(RtDoseReader, RejectsOffsetsThatAreNeitherRelativeNorAbsolute) {
  const std::string path = test::scratch_dir() + "/dose.dcm";
  modify(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"), path,
         [](DcmDataset& ds) { set(ds, DCM_GridFrameOffsetVector, "5\\8\\11\\14\\17"); });
  EXPECT_THROW_WITH(read_rt_dose(path), InputError, "GridFrameOffsetVector (3004,000c)", "starts at 5 mm");
}

TEST(RtDoseReader, RejectsMissingDoseGridScaling) {
  const std::string path = test::scratch_dir() + "/dose.dcm";
  modify(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"), path,
         [](DcmDataset& ds) { ASSERT_TRUE(ds.findAndDeleteElement(DCM_DoseGridScaling).good()); });
  EXPECT_THROW_WITH(read_rt_dose(path), InputError, "DoseGridScaling (3004,000e)", "missing");
}

TEST(RtDoseReader, RejectsTruncatedPixelData) {
  const std::string path = test::scratch_dir() + "/dose.dcm";
  std::filesystem::copy_file(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"), path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  EXPECT_THROW_WITH(read_rt_dose(path), InputError, path.c_str());
}

// ---- RT Structure Set ------------------------------------------------------

TEST(RtStructReader, RejectsContourDataPointCountMismatch) {
  const std::string path = test::scratch_dir() + "/rtstruct.dcm";
  modify(shared("reference/slab_dcpt/rtstruct.dcm"), path, [](DcmDataset& ds) {
    DcmItem& roi_contour = item_of(ds, DCM_ROIContourSequence, 1);
    set(item_of(roi_contour, DCM_ContourSequence, 3), DCM_NumberOfContourPoints, "5");
  });
  EXPECT_THROW_WITH(read_rt_structure_set(path), InputError, path.c_str(), "ROI 2 'Bone_slab', contour 3",
                    "ContourData (3006,0050)", "12 values", "NumberOfContourPoints (3006,0046) is 5");
}

TEST(RtStructReader, RejectsAnRtDoseFile) {
  const std::string path = shared("data/rt-dose/raystation5-abdomen-rtdose.dcm");
  EXPECT_THROW_WITH(read_rt_structure_set(path), InputError, "not an RT Structure Set");
}

}  // namespace
}  // namespace protondose::dicom
