// Rigid registration of a plan onto a CT in another frame of reference: the
// CT's grid re-expressed in the plan's frame, and the dose grid mapped back
// (registration.h, docs/batch.md).
#include "protondose/engine/registration.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::engine {

Grid3 transform_grid(const Grid3& grid, const RigidTransform& to_from) {
  Grid3 g = grid;
  g.origin_mm = to_from.apply(grid.origin_mm);
  for (int a = 0; a < 3; ++a) g.axis[a] = to_from.rotate(grid.axis[a]);
  return g;
}

CtImage ct_in_plan_frame(const CtImage& ct, const RigidTransform& ct_from_plan, const std::string& plan_frame_uid,
                         const std::string& patient_position) {
  CtImage out;
  out.hu.grid = transform_grid(ct.hu.grid, ct_from_plan.inverse());
  out.hu.data = ct.hu.data;
  out.patient_position = patient_position;
  out.study_instance_uid = ct.study_instance_uid;
  out.series_instance_uid = ct.series_instance_uid;
  out.frame_of_reference_uid = plan_frame_uid;
  out.patient_id = ct.patient_id;
  out.patient_name = ct.patient_name;
  return out;
}

Volume<float> dose_in_ct_frame(Volume<float> dose, const RigidTransform& ct_from_plan, const Grid3& ct_frame_grid) {
  const Grid3 mapped = transform_grid(dose.grid, ct_from_plan);
  std::ostringstream why;
  if (mapped.size != ct_frame_grid.size || mapped.spacing_mm != ct_frame_grid.spacing_mm) {
    why << "size or spacing differ";
  } else {
    // The farthest voxel centre is where a rotation residue shows most.
    const Vec3 far_a = mapped.position_mm(mapped.size[0] - 1, mapped.size[1] - 1, mapped.size[2] - 1);
    const Vec3 far_b = ct_frame_grid.position_mm(mapped.size[0] - 1, mapped.size[1] - 1, mapped.size[2] - 1);
    for (int c = 0; c < 3; ++c) {
      if (std::abs(mapped.origin_mm[c] - ct_frame_grid.origin_mm[c]) > 1e-6 || std::abs(far_a[c] - far_b[c]) > 1e-6)
        why << "voxel positions differ by more than 1e-6 mm along patient axis " << c << "; ";
      for (int a = 0; a < 3; ++a)
        if (std::abs(mapped.axis[a][c] - ct_frame_grid.axis[a][c]) > 1e-9)
          why << "axis " << a << " component " << c << " differs by " << mapped.axis[a][c] - ct_frame_grid.axis[a][c]
              << "; ";
    }
  }
  if (!why.str().empty())
    throw InternalError("registration: the dose grid mapped back to the CT's frame is not the CT's output grid (" +
                        why.str() + ")");
  dose.grid = ct_frame_grid;
  return dose;
}

}  // namespace protondose::engine
