#pragma once
// Internal: constructors of the concrete backends, chosen by make_superposer.
#include <memory>

#include "protondose/gpu/superposition.h"

namespace protondose {

std::unique_ptr<Superposer> make_cpu_reference_superposer(const SuperpositionOptions& options);
/// Throws UnavailableError when built without CUDA or no device is present.
std::unique_ptr<Superposer> make_gpu_superposer(SuperpositionMethod method,
                                                const SuperpositionOptions& options);

}  // namespace protondose

#include "protondose/gpu/separable_convolution.h"

namespace protondose {

/// Throws UnavailableError when built without CUDA or no device is present.
std::unique_ptr<Convolver> make_gpu_convolver(ConvolutionMethod method,
                                              const SuperpositionOptions& options);

}  // namespace protondose
