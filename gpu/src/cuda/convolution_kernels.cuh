#pragma once
// Host launchers of the uniform-σ convolution kernels.
#include <cuda_runtime.h>

#include <vector>

#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/gpu/separable_convolution.h"
#include "protondose/gpu/superposition.h"

namespace protondose::cuda {

struct ConvolutionParams {
  int slices = 0, rows = 0, cols = 0;
  int max_radius = 0;               ///< largest radius of the stack (stride of the weight tables)
  const int* radius_x = nullptr;    ///< [slice]
  const int* radius_y = nullptr;    ///< [slice]
  const float* weights_x = nullptr; ///< [slice][max_radius + 1]: K(d, σx) for d = 0 … r, 0 beyond
  const float* weights_y = nullptr;
  /// Separable passes over a list of slices of a larger stack (the uniform-σ
  /// slices of a superposition): entry k reads input slice slice_of[k] and
  /// writes output slice slice_of[k], while the radii, weights and the row
  /// pass's intermediate are indexed by k, and `slices` counts the entries.
  /// Null: entry k is slice k.
  const int* slice_of = nullptr;
  /// SuperpositionInput::slice_box, indexed by stack slice (slice_of[k]);
  /// null: every pixel may be non-zero. The passes read no input outside a
  /// slice's box and leave the row pass's intermediate unwritten in the rows
  /// outside it (the column pass reads zeros there instead).
  const SliceBox* slice_box = nullptr;
  /// Deterministic superposition: the column pass stores fixed-point values
  /// (to_fixed) here instead of floats in `out`.
  unsigned long long* out_fixed = nullptr;
  const double* fixed_scale = nullptr;
};

/// Slice s's box clipped to a rows × cols slice, begin ≤ end on both axes
/// (SuperpositionInput::slice_box); the whole slice where there are no boxes.
__device__ inline SliceBox clipped_slice_box(const SliceBox* boxes, int s, int rows, int cols) {
  if (!boxes) return {0, cols, 0, rows};
  const SliceBox& b = boxes[s];
  SliceBox c;
  c.col_begin = min(max(b.col_begin, 0), cols);
  c.col_end = max(min(b.col_end, cols), c.col_begin);
  c.row_begin = min(max(b.row_begin, 0), rows);
  c.row_end = max(min(b.row_end, rows), c.row_begin);
  return c;
}

/// Slice s's box as a kernel compiled for boxes (kBoxed) or without them
/// takes it: without, the whole slice as a compile-time fact, so that those
/// kernels compile as they did before boxes (testing the pointer at run time
/// made the separable passes 10–12 % slower, H100, KS bench section C).
template <bool kBoxed>
__device__ inline SliceBox slice_box_of(const SliceBox* boxes, int s, int rows, int cols) {
  if constexpr (kBoxed) return clipped_slice_box(boxes, s, rows, cols);
  else return {0, cols, 0, rows};
}

/// v in [begin, end), for begin ≤ end (one unsigned comparison).
__device__ inline bool in_range(int v, int begin, int end) {
  return static_cast<unsigned>(v - begin) < static_cast<unsigned>(end - begin);
}

/// Fixed-point value of a non-negative float in the superposition's
/// deterministic mode (scale: a power of two, superposition_kernels.cu).
__device__ inline unsigned long long to_fixed(float value, double scale) {
  return static_cast<unsigned long long>(llrint(static_cast<double>(value) * scale));
}

/// The column pass into groups of slices (SuperpositionInput::groups):
/// out[g] += the group's member slices in order, each from the row pass's
/// intermediate where uniform_index[slice] = k ≥ 0 (entry k of the
/// ConvolutionParams), else from `scattered` (the stack's output, where the
/// scatter left the other slices).
struct GroupedColumns {
  SuperpositionInput::SliceGroups groups;  ///< the caller's
  const int* uniform_index = nullptr;      ///< [stack slice]: its entry k, −1 if not uniform
  const float* scattered = nullptr;        ///< [stack slice][row][col]
};

/// Raises the dynamic shared-memory limits of the separable passes to what
/// radius max_radius needs (once per size; grow-only).
void set_convolution_shared_memory_limits(int max_radius);
/// The separable row and column passes (in → scratch → out; scratch holds
/// p.slices planes), grids chunked at 65,535 slices.
void launch_separable(const ConvolutionParams& p, const float* in, float* scratch, float* out, cudaStream_t stream);
/// The row pass alone (in → scratch).
void launch_separable_rows(const ConvolutionParams& p, const float* in, float* scratch, cudaStream_t stream);
/// The column pass from the row pass's scratch into the groups of `g`.
void launch_grouped_columns(const ConvolutionParams& p, const GroupedColumns& g, const float* scratch,
                            cudaStream_t stream);

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
