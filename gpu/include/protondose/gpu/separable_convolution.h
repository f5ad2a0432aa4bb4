#pragma once
/// \file separable_convolution.h
/// Gaussian convolution of slices whose σ is uniform within each slice — a true,
/// spatially invariant convolution. The dose engine uses it to spread spot
/// weights onto the ray grid (spot size at the entry plane); the dispatcher can
/// use it instead of the kernel superposition when a slice's σ-map is uniform.
///
/// Same weights, cut-off and clipped output grid as superposition.h: for uniform
/// σ the result equals the kernel superposition of that slice. The separable
/// path is a row pass then a column pass, each over a shared-memory tile with an
/// apron of r pixels (Podlozhnyuk, "Image convolution with CUDA",
/// shared/papers/separable-convolution-cuda.txt). The direct 2D designs of the
/// two convolution reports in shared/papers are kept for the benchmark.

#include <memory>
#include <vector>

#include "protondose/gpu/superposition.h"

namespace protondose {

/// One σ pair per slice. image is [slice][row][col]; sigma_x_px and sigma_y_px
/// hold shape.slices values each.
struct UniformSigmaInput {
  StackShape shape;
  ConstFloatSpan image;
  ConstFloatSpan sigma_x_px;  ///< per slice, pixels along x (cols)
  ConstFloatSpan sigma_y_px;  ///< per slice, pixels along y (rows)
};

enum class ConvolutionMethod {
  kCpuSeparable,          ///< double precision row then column pass on the CPU (the oracle)
  kGpuSeparable,          ///< row then column pass, shared-memory aprons
  kGpuDirectGlobal,       ///< 2D direct convolution, image and 2D kernel read from global memory
  kGpuDirectConstant,     ///< 2D direct, kernel in constant memory (one σ for the whole stack)
  kGpuDirectSharedTile,   ///< 2D direct, image tile + apron in shared memory, kernel in constant memory
};

const char* method_name(ConvolutionMethod method);

/// Throws InputError for a bad stack (as validate_superposition_input), per-slice
/// σ arrays of the wrong length, negative/NaN σ, or a radius beyond
/// kMaxKernelRadiusPx. The direct constant-memory designs also need one σ for
/// the whole stack and r ≤ 63 (the 2D kernel must fit in 64 KiB).
void validate_uniform_sigma_input(const UniformSigmaInput& input, const SuperpositionOptions& options);

/// The CPU oracle in double precision, multi-threaded over slices.
std::vector<double> convolve_separable_cpu(const UniformSigmaInput& input,
                                           const SuperpositionOptions& options = {});

class Convolver {
 public:
  virtual ~Convolver() = default;
  virtual ConvolutionMethod method() const = 0;
  /// Host arrays in and out; output holds shape.pixel_count() floats.
  virtual void convolve(const UniformSigmaInput& input, float* output) = 0;
};

/// GPU methods throw UnavailableError without CUDA or device (never a CPU fallback).
std::unique_ptr<Convolver> make_convolver(ConvolutionMethod method,
                                          const SuperpositionOptions& options = {});

}  // namespace protondose
