#pragma once
/// \file resample.h
/// Trilinear resampling of a dose (or any scalar volume) onto another grid, and
/// point sampling with the same interpolation. Used to bring an evaluated dose
/// onto the reference grid before gamma, dose difference and DVH.

#include <cstddef>

#include "protondose/core/grid.h"

namespace protondose::compare {

/// Trilinear interpolation of `src` at continuous voxel index (i, j, k) of its
/// own grid. Inside the box spanned by the voxel centres the result is exact for
/// fields linear in position. Within half a voxel outside that box (still inside
/// the grid's extent, which runs to the outer voxel faces) the edge voxel value
/// is used along that axis; beyond the extent the result is 0 — a dose outside
/// the calculated grid is zero, as for an RT Dose. No bounds errors.
float sample_trilinear(const Volume<float>& src, double i, double j, double k);

/// True when continuous index (i, j, k) lies inside the extent of `grid`
/// (within half a voxel of the outermost voxel centres).
bool inside_extent(const Grid3& grid, double i, double j, double k);

/// Resamples `src` onto `dst` (any position, spacing and orientation; both in
/// the patient frame, mm) with sample_trilinear at every voxel centre of dst.
/// If `outside_count` is not null it receives the number of dst voxels whose
/// centre lies outside src's extent (and therefore got 0).
/// Throws InputError if either grid is invalid or src.data does not match its grid.
Volume<float> resample_trilinear(const Volume<float>& src, const Grid3& dst,
                                 std::size_t* outside_count = nullptr);

}  // namespace protondose::compare
