#pragma once
/// \file registration.h
/// A job whose plan was made in another frame of reference than its CT's,
/// related by a rigid registration (ct_from_plan; a DICOM Spatial Registration
/// in `protondose batch`, docs/batch.md). Method: the CT is re-expressed in the
/// plan's frame — the same voxels, its grid's origin and axes mapped by
/// plan_from_ct — the dose is computed there with the plan exactly as
/// planned, and the dose grid (on the CT's axes, engine output_grid) is mapped
/// back by ct_from_plan. A rigid map of a regular grid is a regular grid, so
/// neither the HU nor the dose are interpolated beyond what the engine always
/// does: the result is the dose of the plan placed on the new CT by the
/// registration, on the grid a job without registration would give.

#include <string>

#include "protondose/core/grid.h"
#include "protondose/core/plan.h"
#include "protondose/core/rigid_transform.h"

namespace protondose::engine {

/// The grid `grid` (given in frame "from") expressed in frame "to": origin
/// to_from.apply(origin), every axis to_from.rotate(axis); sizes and spacings
/// unchanged. Voxel (i, j, k) is the same point in space.
Grid3 transform_grid(const Grid3& grid, const RigidTransform& to_from);

/// The CT re-expressed in the plan's frame (same HU values, grid mapped by
/// ct_from_plan.inverse()), carrying `plan_frame_uid` as its
/// FrameOfReferenceUID and `patient_position` (the plan's setup; the beams'
/// geometry is defined in the plan's frame). Other identity fields are copied.
CtImage ct_in_plan_frame(const CtImage& ct, const RigidTransform& ct_from_plan, const std::string& plan_frame_uid,
                         const std::string& patient_position);

/// The dose computed on ct_in_plan_frame() brought back to the CT's frame: its
/// grid mapped by ct_from_plan, which must coincide with `ct_frame_grid` (the
/// engine's output_grid of the CT's own grid) within 1e-6 mm per voxel
/// position and 1e-9 per axis component; the result carries `ct_frame_grid`
/// exactly. Values are not touched. InternalError naming the deviation otherwise.
Volume<float> dose_in_ct_frame(Volume<float> dose_in_plan_frame, const RigidTransform& ct_from_plan,
                               const Grid3& ct_frame_grid);

}  // namespace protondose::engine
