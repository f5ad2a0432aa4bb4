// The GPU backends run the layer images (kernels::layer_ray<float>) in single
// precision, the CPU backend in double. DoseEngineOptions::
// cpu_float_layer_images_for_testing makes the CPU backend run the float
// instantiation with everything else unchanged, so this suite measures, on the
// engine's test cases and without a GPU, what float costs in dose: the GPU
// backends' budget against the CPU oracle is 1e-4 of D_max
// (gpu/backend_test.cpp), and float should take a small part of it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "engine_cases.h"
#include "protondose/core/error.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::CtImage;
using protondose::IonPlan;

namespace {

/// Largest |D_float − D_double| the float layer images may add, as a fraction of D_max.
constexpr double kMaxDeviationOfDmax = 2e-5;

const protondose::physics::BeamModel& machine() {
  static const protondose::physics::BeamModel m = protondose::physics::load_machine("DCPT_ProBeam_v5");
  return m;
}

/// A water box like the reference case water_dcpt (200 × 250 × 200 mm at
/// 2 mm, in air), one gantry-0 beam of 180, 140 and 100 MeV, 9 × 9 spots on a
/// 6 mm grid: 180 MeV pencils take ~220 steps of the moment recursion.
CtImage water_box_ct() {
  return pt::ct_from({110, 135, 110}, {2, 2, 2}, {-109, -134, -109}, [](const protondose::Vec3& p) {
    return std::abs(p[0]) < 100 && std::abs(p[1]) < 125 && std::abs(p[2]) < 100 ? 0.0 : -1000.0;
  });
}

IonPlan water_box_plan() {
  IonPlan plan;
  plan.label = "water box";
  plan.beams.push_back(pt::square_field_beam(1, 0, {180.0, 140.0, 100.0}, 24, 6, 1.0));
  return plan;
}

/// Computes one case with double and with float layer images; expects the
/// float dose within kMaxDeviationOfDmax of D_max and the energy unchanged.
void expect_float_layer_images_match_double(const std::string& name, pe::DoseEngineOptions o, const CtImage& ct,
                                            const IonPlan& plan) {
  o.backend = pe::Backend::kCpu;
  o.cpu_float_layer_images_for_testing = false;
  const pe::DoseResult d = pe::DoseEngine(machine(), protondose::physics::default_hu_curve(), o).compute(ct, plan);
  o.cpu_float_layer_images_for_testing = true;
  const pe::DoseResult f = pe::DoseEngine(machine(), protondose::physics::default_hu_curve(), o).compute(ct, plan);
  ASSERT_GT(d.max_dose_gy, 0.0) << name;
  ASSERT_EQ(d.dose_gy.grid, f.dose_gy.grid) << name;
  double worst = 0;
  std::size_t worst_voxel = 0, above = 0;
  for (std::size_t i = 0; i < d.dose_gy.data.size(); ++i) {
    const double delta = std::abs(static_cast<double>(f.dose_gy.data[i]) - d.dose_gy.data[i]);
    if (delta > worst) {
      worst = delta;
      worst_voxel = i;
    }
    if (d.dose_gy.data[i] > 0.1 * d.max_dose_gy) ++above;
  }
  const double expected_change = f.energy.expected_mev / d.energy.expected_mev - 1;
  const double deposited_change = f.energy.deposited_mev / d.energy.deposited_mev - 1;
  std::printf("%s: float vs double layer images: max |dD| = %.3g of Dmax (voxel %zu: %.7g vs %.7g Gy, Dmax %.7g Gy), "
              "%zu voxels above 10 %%; energy expected %+.3g, deposited %+.3g\n",
              name.c_str(), worst / d.max_dose_gy, worst_voxel, f.dose_gy.data[worst_voxel],
              d.dose_gy.data[worst_voxel], d.max_dose_gy, above, expected_change, deposited_change);
  EXPECT_GT(above, 1000u) << name;
  EXPECT_GT(worst, 0.0) << name << ": bitwise the double dose, so the float layer images did not run";
  EXPECT_LE(worst, kMaxDeviationOfDmax * d.max_dose_gy) << name;
  EXPECT_NEAR(expected_change, 0.0, 1e-6) << name;
  EXPECT_NEAR(deposited_change, 0.0, 1e-6) << name;
}

}  // namespace

class FloatLayerImages : public ::testing::TestWithParam<int> {};

TEST_P(FloatLayerImages, MatchTheDoubleOnesOnTheHeterogeneousCase) {
  const pt::Variant& v = pt::kVariants[GetParam()];
  expect_float_layer_images_match_double(v.name, pt::variant_options(pe::Backend::kCpu, v), pt::heterogeneous_ct(),
                                         pt::variant_plan(v));
}

INSTANTIATE_TEST_SUITE_P(Variants, FloatLayerImages, ::testing::Range(0, 3));

TEST(FloatLayerImages, MatchTheDoubleOnesWithThePublishedHaloModel) {
  // Soukup's halo adds the core's own width in quadrature (halo_sigma_is_added).
  pe::DoseEngineOptions o;
  o.halo_model = protondose::physics::HaloModel::kSoukup2005;
  expect_float_layer_images_match_double("Soukup halo", o, pt::heterogeneous_ct(), pt::two_beam_plan());
}

TEST(FloatLayerImages, MatchTheDoubleOnesOverTheLongPencilsOfAWaterBox) {
  expect_float_layer_images_match_double("water box", pe::DoseEngineOptions{}, water_box_ct(), water_box_plan());
}

TEST(FloatLayerImages, TheTestingOptionOnAGpuBackendIsAConfigErrorNamingIt) {
  pe::DoseEngineOptions o;
  o.backend = pe::Backend::kGpu;
  o.cpu_float_layer_images_for_testing = true;
  try {
    o.validate();
    FAIL() << "expected ConfigError";
  } catch (const protondose::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_float_layer_images_for_testing"), std::string::npos) << e.what();
  }
}
