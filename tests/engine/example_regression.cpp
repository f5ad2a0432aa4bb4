// The bundled example (data/example, scripts/make-example) stays computable:
// read from DICOM as `protondose compute` does, two beams through bone and lung.
#include <gtest/gtest.h>

#include <cstdio>

#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"

namespace pe = protondose::engine;

TEST(ExampleRegression, BundledExampleGivesAboutTwoGrayAtTheIsocentre) {
  const std::string dir = std::string(PROTONDOSE_DATA_DIR) + "/example";
  const protondose::CtImage ct = protondose::dicom::read_ct_series(dir + "/ct");
  const protondose::IonPlan plan = protondose::dicom::read_ion_plan(dir + "/plan.dcm");
  pe::DoseEngineOptions o;
  o.keep_per_beam = true;
  const pe::DoseEngine engine(protondose::physics::load_machine(plan.beams.at(0).machine_name),
                              protondose::physics::default_hu_curve(), o);
  const pe::DoseResult r = engine.compute(ct, plan);
  ASSERT_EQ(r.beams.size(), 2u);
  EXPECT_EQ(r.spots, 2u * 11u * 81u);
  // Mean of the 8 voxels around the isocentre (voxel centres at ±1.5 mm).
  const auto& d = r.dose_gy;
  double iso = 0;
  for (int k = 23; k <= 24; ++k)
    for (int j = 31; j <= 32; ++j)
      for (int i = 31; i <= 32; ++i) iso += d.at(i, j, k) / 8.0;
  std::printf("example: %.2f s, dose at the isocentre %.3f Gy, max %.3f Gy, energy %+.2f %%\n", r.timings.total_s, iso,
              r.max_dose_gy, 100 * r.energy.relative_difference());
  EXPECT_NEAR(iso, 1.83, 0.1);  // two opposed, unoptimised beams (2.01 Gy maximum at the time of writing)
  EXPECT_LT(r.max_dose_gy, 2.3);
  EXPECT_LT(std::abs(r.energy.relative_difference()), r.energy_balance_tolerance);
  // Each beam alone puts its own share at the isocentre; together they add.
  double sum_beams = 0;
  for (const auto& b : r.beams) {
    ASSERT_EQ(b.dose_gy.data.size(), d.data.size());
    sum_beams += b.dose_gy.at(31, 31, 23);
  }
  EXPECT_NEAR(sum_beams, d.at(31, 31, 23), 1e-5);
}
