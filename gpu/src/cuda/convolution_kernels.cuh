#pragma once
// Host launchers of the uniform-σ convolution kernels.
#include <cuda_runtime.h>

#include <vector>

#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/gpu/separable_convolution.h"

namespace protondose::cuda {

struct ConvolutionParams {
  int slices = 0, rows = 0, cols = 0;
  int max_radius = 0;               ///< largest radius of the stack (stride of the weight tables)
  const int* radius_x = nullptr;    ///< [slice]
  const int* radius_y = nullptr;    ///< [slice]
  const float* weights_x = nullptr; ///< [slice][max_radius + 1]: K(d, σx) for d = 0 … r, 0 beyond
  const float* weights_y = nullptr;
};

/// Radii and 1D/2D weights computed on the host from the per-slice σ.
struct PreparedConvolution {
  std::vector<int> radius_x, radius_y;
  int max_radius = 0;
  std::vector<float> weights_x, weights_y;  ///< [slice][max_radius + 1]
  std::vector<float> kernel_2d;             ///< direct designs: (2R+1)², R = max_radius
};

PreparedConvolution prepare_convolution(ConvolutionMethod method, const UniformSigmaInput& input,
                                        const SuperpositionOptions& options);

/// A convolution ready to launch on device arrays (weights uploaded once).
class DeviceConvolution {
 public:
  DeviceConvolution(ConvolutionMethod method, const UniformSigmaInput& input, const SuperpositionOptions& options);
  /// d_in and d_out hold slices × rows × cols floats; d_out is overwritten.
  void launch(const float* d_in, float* d_out, cudaStream_t stream);

 private:
  ConvolutionMethod method_;
  PreparedConvolution prep_;
  ConvolutionParams params_;
  DeviceBuffer<int> radii_;
  DeviceBuffer<float> weights_, scratch_, kernel_;
};

}  // namespace protondose::cuda
