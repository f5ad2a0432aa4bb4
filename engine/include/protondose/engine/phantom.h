#pragma once
/// \file phantom.h
/// Box phantoms for checks and commissioning: water (or any HU) in air, with
/// optional slabs of other HU, placed in a plan's frame of reference around its
/// isocentres, as a CtImage ready for dicom::write_ct_series.

#include <string>
#include <vector>

#include "protondose/core/plan.h"

namespace protondose::engine {

/// A slab across the whole box, between two planes normal to a patient axis.
struct PhantomSlab {
  int axis = 1;          ///< patient axis the slab is normal to: 0 = x, 1 = y, 2 = z
  double from_mm = 0;    ///< lower plane, relative to the phantom centre (mm)
  double to_mm = 0;      ///< upper plane (mm, > from_mm)
  float hu = 0;          ///< CT number inside the slab
};

struct PhantomSpec {
  Vec3 box_size_mm{200, 200, 200};  ///< water box extent along patient x, y, z (mm, > 0)
  double margin_mm = 20;            ///< air around the box on every side (mm, ≥ 0)
  double spacing_mm = 2;            ///< voxel pitch (mm, > 0)
  float box_hu = 0;                 ///< CT number of the box (water)
  float air_hu = -1000;             ///< CT number outside it
  std::vector<PhantomSlab> slabs;   ///< applied in order, later ones win
};

/// Parses "AXIS:FROM:TO:HU" (e.g. "y:-80:-60:1300", mm relative to the phantom
/// centre). Throws ConfigError naming the text for a malformed value, an axis
/// other than x, y, z, or FROM ≥ TO.
PhantomSlab parse_phantom_slab(const std::string& text);

/// The phantom centred on the midpoint of the plan's isocentres, with the plan's
/// frame of reference, study and patient identity (PatientPosition HFS). Voxel
/// faces lie on the box faces when box size and margin are multiples of the
/// spacing. Throws ConfigError for invalid sizes, InputError for a plan with no beams.
CtImage make_box_phantom(const IonPlan& plan, const PhantomSpec& spec);

}  // namespace protondose::engine
