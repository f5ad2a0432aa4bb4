#pragma once
// The engine's heterogeneous test case and its variants, shared by the suites
// that compare two ways of computing one dose: the GPU backends against the CPU
// backend (gpu/backend_test.cpp) and the float layer images against the double
// ones (float_layer_images_test.cpp).

#include <array>
#include <cmath>
#include <cstddef>
#include <initializer_list>

#include "protondose/core/grid.h"
#include "protondose/core/plan.h"
#include "protondose/engine/dose_engine.h"

namespace protondose::engine::testing {

/// A head-first-supine CT of `size` voxels of `spacing_mm` from `origin_mm`
/// whose HU at each voxel centre is hu_at(position in mm).
template <class HuAt>
CtImage ct_from(std::array<int, 3> size, Vec3 spacing_mm, Vec3 origin_mm, HuAt&& hu_at) {
  CtImage ct;
  Grid3 g;
  g.size = size;
  g.spacing_mm = spacing_mm;
  g.origin_mm = origin_mm;
  ct.hu = Volume<float>(g);
  for (int k = 0; k < g.size[2]; ++k)
    for (int j = 0; j < g.size[1]; ++j)
      for (int i = 0; i < g.size[0]; ++i) ct.hu.at(i, j, k) = static_cast<float>(hu_at(g.position_mm(i, j, k)));
  ct.patient_position = "HFS";
  return ct;
}

/// Beam `number` of DCPT_ProBeam_v5 from `gantry_deg`: one layer per energy,
/// each a square of spots from −half_mm to half_mm every step_mm (x and y),
/// `meterset` each.
inline IonBeam square_field_beam(int number, double gantry_deg, std::initializer_list<double> energies_mev,
                                 int half_mm, int step_mm, double meterset) {
  IonBeam b;
  b.number = number;
  b.machine_name = "DCPT_ProBeam_v5";
  b.gantry_angle_deg = gantry_deg;
  for (double e : energies_mev) {
    EnergyLayer layer;
    layer.nominal_energy_mev = e;
    for (int y = -half_mm; y <= half_mm; y += step_mm)
      for (int x = -half_mm; x <= half_mm; x += step_mm) layer.spots.push_back({double(x), double(y), meterset});
    b.layers.push_back(layer);
  }
  return b;
}

/// The bundled example's geometry (scripts/make-example): an elliptic water
/// cylinder with a bone rod and a lung insert, HU at a point (mm).
inline float heterogeneous_hu(const Vec3& p) {
  const double x = p[0], y = p[1];
  float hu = -1000;
  if ((x / 80) * (x / 80) + (y / 70) * (y / 70) <= 1) hu = 0;
  if ((x + 35) * (x + 35) + y * y <= 100) hu = 1000;
  if ((x - 40) * (x - 40) + (y + 10) * (y + 10) <= 324) hu = -700;
  return hu;
}

/// heterogeneous_hu at 2 mm.
inline CtImage heterogeneous_ct() { return ct_from({96, 96, 72}, {2, 2, 2}, {-95, -95, -71}, heterogeneous_hu); }

/// Two opposed beams of 11 layers × 81 spots through heterogeneous_ct().
inline IonPlan two_beam_plan() {
  IonPlan plan;
  plan.label = "backends";
  for (int n = 0; n < 2; ++n) {
    IonBeam b;
    b.number = n + 1;
    b.machine_name = "DCPT_ProBeam_v5";
    b.gantry_angle_deg = n == 0 ? 90 : 270;
    for (int li = 0; li < 11; ++li) {
      EnergyLayer layer;
      layer.nominal_energy_mev = std::pow((105.0 - 5 * li) / 10.0 / 0.0022, 1 / 1.77);
      for (int y = -24; y <= 24; y += 6)
        for (int x = -24; x <= 24; x += 6) layer.spots.push_back({double(x), double(y), 0.03 - 0.002 * li});
      b.layers.push_back(layer);
    }
    plan.beams.push_back(b);
  }
  return plan;
}

/// What differs between the variants of the case: each exercises a path of the
/// executors that the default case does not.
struct Variant {
  const char* name;
  bool range_shifter = false;        ///< a 30 mm WET shifter on beam 1 (shifter moments, drift)
  double output_grid_mm = 0;         ///< 0: the CT grid; else a coarser dose grid (resampling, energy balance)
  bool split_layers = false;         ///< a stack budget far below one beam: one group per layer or so
  bool dose_to_medium = false;
  double couch_deg = 0;              ///< non-coplanar beams (the geometry's rotations)
  bool keep_per_beam = false;
  bool rbe = false;                  ///< RBE-weighted dose (1.1): the plan scaled at the end
  /// 0: the default halo grid (8 mm: 8 rays per coarse pixel, which the GPU's
  /// layer kernel sums in column groups of 8); 3 and 2 mm give groups of 1
  /// and 2 rays (kernels::halo_column_bin).
  double halo_pitch_mm = 0;
};

inline const Variant kVariants[] = {
    {"default"},
    // 2.5 mm: rows of 77 voxels, so that the GPU's resampling runs of 4
    // voxels (resample_finish_kernel) also cross row ends and the grid's end.
    {"shifter, 2.5 mm grid, layer groups", true, 2.5, true},
    {"dose to medium, couch 30 deg, per beam, RBE 1.1", false, 0, false, true, 30.0, true, true},
    // The GPU backend's other halo column groups (its tests only).
    {"halo on 3 mm pixels", false, 0, false, false, 0, false, false, 3.0},
    {"halo on 2 mm pixels, layer groups", false, 0, true, false, 0, false, false, 2.0},
};

/// The engine options of a variant on `backend` (the rest default).
inline DoseEngineOptions variant_options(Backend backend, const Variant& v) {
  DoseEngineOptions o;
  o.backend = backend;
  if (v.output_grid_mm > 0) o.output_spacing_mm = v.output_grid_mm;
  if (v.split_layers) o.max_stack_bytes = std::size_t{24} << 20;  // 1 M pixels
  if (v.dose_to_medium) o.quantity = DoseQuantity::kDoseToMedium;
  o.keep_per_beam = v.keep_per_beam;
  if (v.rbe) o.rbe_factor = 1.1;
  if (v.halo_pitch_mm > 0) o.halo_pitch_mm = v.halo_pitch_mm;
  return o;
}

/// two_beam_plan() as the variant changes it.
inline IonPlan variant_plan(const Variant& v) {
  IonPlan plan = two_beam_plan();
  for (auto& b : plan.beams) b.couch_angle_deg = v.couch_deg;
  if (v.range_shifter) {
    RangeShifter rs;
    rs.id = "RS30";
    rs.water_equivalent_thickness_mm = 30;
    rs.isocenter_to_shifter_mm = 300;
    plan.beams[0].range_shifters.push_back(rs);
  }
  return plan;
}

}  // namespace protondose::engine::testing
