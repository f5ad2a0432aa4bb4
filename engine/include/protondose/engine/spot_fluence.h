#pragma once
/// \file spot_fluence.h
/// Spreading one energy layer's spots onto the rays of a BEV grid (da Silva et
/// al. 2015, §2.4): each spot's protons are distributed over the rays with a
/// Gaussian of uniform width, the spot size at the plane where fluence is
/// defined, expressed in isocentre-plane coordinates. The weight of a ray is
/// the Gaussian integrated over the ray's pixel (erf differences), so a spot
/// well inside the grid keeps its protons up to the tail beyond the cut-off.
/// The weights are engine/src/beam_kernels.h's, shared with the GPU executor,
/// which spreads the spots on the device (one thread per spot and ray).

#include <vector>

#include "protondose/engine/bev_grid.h"

namespace protondose::engine {

/// A spot as the fluence spreading needs it.
struct SpotProtons {
  double x_iso_mm = 0.0;  ///< IEC gantry X at the isocentre plane (mm)
  double y_iso_mm = 0.0;  ///< IEC gantry Y at the isocentre plane (mm)
  double protons = 0.0;   ///< protons per fraction (≥ 0)
};

/// Throws InputError naming `what` and the spot for a negative or non-finite
/// proton count or position.
void validate_spots(const std::vector<SpotProtons>& spots, const char* what);

/// Protons per ray, [row][col], of the spots spread with σ (mm, isocentre-plane
/// units, ≥ 0; 0 = all protons on the ray nearest to the spot) along x and y,
/// cut at cutoff_sigmas·σ (the contribution beyond is dropped, as in the
/// superposition). Throws InputError for a negative or non-finite σ, proton
/// count or position, or cutoff_sigmas ≤ 0.
std::vector<double> spread_spots_to_rays(const BevGrid& grid, const std::vector<SpotProtons>& spots,
                                         double sigma_x_iso_mm, double sigma_y_iso_mm, double cutoff_sigmas);

}  // namespace protondose::engine
