#pragma once
// Internal: timed runs of every GPU variant for the KS benchmark (gpu/bench).
// Inputs live on the device for the timing; only kernel work between two CUDA
// events is timed (warm-up runs first). No CUDA types.
#include <string>
#include <vector>

#include "protondose/gpu/separable_convolution.h"
#include "protondose/gpu/superposition.h"

namespace protondose::bench {

enum class SuperpositionVariant {
  kGatherExact,               ///< analysis + exact gather
  kScatterAtomic,             ///< analysis + global-atomics scatter
  kScatterTiled,              ///< analysis + tile scatter, buckets launched from the host (the default)
  kScatterTiledDeviceLaunch,  ///< the same, buckets launched from the device (dynamic parallelism)
  kScatterTiledDeterministic, ///< the default with fixed-point flushes
  kScatterTiledFixedRadius,   ///< one tile kernel with r = fixed_radius for every tile (the paper's experiment)
  kRegisterBlocked,           ///< analysis + register-blocked scatter over the buckets
  kRegisterBlockedFixedRadius,///< the register-blocked kernel with r = fixed_radius for every tile
  kTensorCore,                ///< analysis + tensor-core scatter over the buckets (options.tensor_core_min_radius_px)
  kTensorCoreDeterministic,   ///< the same with fixed-point flushes
  kTensorCoreFixedRadius,     ///< the tensor-core kernel with r = fixed_radius for every tile (fresh row sums)
  kTensorCoreFixedRadiusChained,  ///< the same, one mma chain per output block
};

const char* variant_name(SuperpositionVariant variant);

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  int repetitions = 0;
  std::vector<float> output;  ///< result of the last run (for the accuracy check)
};

Timing time_superposition(SuperpositionVariant variant, const SuperpositionInput& host_input,
                          const SuperpositionOptions& options, int fixed_radius, int warmup, int repetitions);

Timing time_convolution(ConvolutionMethod method, const UniformSigmaInput& host_input,
                        const SuperpositionOptions& options, int warmup, int repetitions);

}  // namespace protondose::bench
