#pragma once
/// \file resample.h
/// From the BEV grid back to the patient (da Silva et al. 2015, §2.7): the BEV
/// dose is interpolated trilinearly in (col, row, slice) at the centre of every
/// output voxel and added to the output volume.

#include <vector>

#include "protondose/core/grid.h"
#include "protondose/engine/bev_grid.h"
#include "protondose/engine/geometry.h"

namespace protondose::engine {

/// Trilinear value of a BEV array ([slice][row][col]) at a fractional index;
/// 0 beyond half a pixel outside the grid, the edge value within that half pixel.
float sample_bev(const BevGrid& grid, const std::vector<float>& values, double col, double row, double slice);

/// Adds `scale`·(BEV dose interpolated at each output voxel centre) to `out`.
/// Multi-threaded over output slices (threads = 0: default_thread_count()).
/// Throws InputError when `bev_values` does not hold grid.pixel_count() values
/// or `out` does not match its grid.
void add_bev_to_patient(const BevGrid& grid, const BeamFrame& frame, const std::vector<float>& bev_values,
                        double scale, Volume<float>& out, int threads = 0);

}  // namespace protondose::engine
