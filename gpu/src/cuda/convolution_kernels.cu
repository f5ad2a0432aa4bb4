// Gaussian convolution for slices of uniform σ: the separable row/column passes
// (Podlozhnyuk, shared/papers/separable-convolution-cuda.txt) and, for the
// benchmark, the direct 2D designs of the convolution reports in shared/papers
// (kernel in global memory, in constant memory, and a shared-memory tile).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../backends.h"
#include "convolution_kernels.cuh"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/gpu/cuda/per_device_setting.cuh"
#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"
#include "protondose/gpu/gaussian_kernel.h"

namespace protondose::cuda {
namespace {

// Row pass: 4 adjacent outputs per thread (one float4 of samples and one of
// weights feed 16 FMAs), a block of 256 threads over up to 8 such groups per
// thread: whole rows of up to 8192 px, as many rows as fill the groups (≤ 32).
constexpr int kRowOutputs = 4;
constexpr int kRowThreads = 256;
constexpr int kRowGroupsPerBlock = 8 * kRowThreads;
constexpr int kMaxRowTileRows = 32;
constexpr int kColumnTileCols = 32;    // column pass: 32 columns ...
constexpr int kColumnTileRows = 128;   // ... × 128 rows per block, 8 rows of threads,
constexpr int kColumnThreadRows = 8;   // each summing blocks of 8 adjacent rows of its column
constexpr int kColumnOutputs = 8;
static_assert(kColumnTileRows % (kColumnThreadRows * kColumnOutputs) == 0, "whole passes of 8-row blocks per tile");
constexpr int kLoadBatch = 8;          // row pass: global loads in flight per thread
constexpr int kSeparableBlocksPerSm = 6;  // 6 blocks of 256 threads per SM (≤ 40 registers)
constexpr int kDirectTile = 32;        // direct shared-tile: 32 × 32 outputs per block
constexpr int kMaxConstantRadius = 63;  // (2·63+1)² floats = 63.5 KiB of constant memory

__constant__ float c_kernel_2d[(2 * kMaxConstantRadius + 1) * (2 * kMaxConstantRadius + 1)];

/// A row-pass block: `rows` image rows × `cols` outputs (a multiple of kRowOutputs) of one slice.
struct RowTile {
  int rows = 0, cols = 0;
};

/// Row-pass taps of a radius: 2R + 1 rounded up to whole float4; the weights
/// beyond 2R are zero, which adds exactly nothing (the images are finite).
__host__ __device__ constexpr int row_taps(int radius) { return (2 * radius + 1 + 3) / 4 * 4; }

/// Shared-memory stride of the row pass's segments, in floats: the tile's
/// outputs and the most taps, rounded so that stride ≡ tile cols (mod 32): a
/// warp's float4 loads stay conflict-free where its groups wrap to the next row.
__host__ __device__ constexpr int row_stride_floats(int tile_cols, int max_radius) {
  return tile_cols + (row_taps(max_radius) + 31) / 32 * 32;
}

/// Weights (row_taps(max_radius) floats) then tile.rows segments.
__host__ __device__ constexpr int row_shared_floats(RowTile tile, int max_radius) {
  return row_taps(max_radius) + tile.rows * row_stride_floats(tile.cols, max_radius);
}

/// Weights (2R + 1 floats) then the tile with its apron.
int column_shared_bytes(int max_radius) {
  return (2 * max_radius + 1 + (kColumnTileRows + 2 * max_radius) * kColumnTileCols) * static_cast<int>(sizeof(float));
}

/// Whole rows (segments of 8192 px beyond), as many as fill kRowGroupsPerBlock groups, ≤ 32.
RowTile row_tile(int rows, int cols) {
  const int groups = std::clamp((cols + kRowOutputs - 1) / kRowOutputs, 1, kRowGroupsPerBlock);
  return {std::max(1, std::min({kRowGroupsPerBlock / groups, kMaxRowTileRows, rows})), kRowOutputs * groups};
}

/// sum[j] += Σ_t w[t] · s[j + t] for 4 outputs j and 4 taps t, samples s = lo, hi.
__device__ inline void accumulate_4x4(float (&sum)[kRowOutputs], float4 lo, float4 hi, float4 w) {
  const float s[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const float wt[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int t = 0; t < 4; ++t)
#pragma unroll
    for (int j = 0; j < kRowOutputs; ++j) sum[j] = fmaf(wt[t], s[j + t], sum[j]);
}

/// Row pass: out[k][y][x] = Σ_u in[slice k][y][x + u − R] · wx[|u − R|], u = 0 … 2R
/// (k = first + blockIdx.z; ConvolutionParams::slice_of), over a RowTile per
/// block. Measured on the water cube (172-px rows, r 10–21 px) with one block
/// per 128-px segment: a third of the threads idle, and instruction-bound at 2
/// shared loads, an add and an FMA per output and tap pair. Here each thread
/// takes 4 adjacent outputs at a time and the block whole rows.
template <bool kBoxed>
__global__ void __launch_bounds__(kRowThreads, kSeparableBlocksPerSm)
    convolve_rows_kernel(ConvolutionParams p, int first, RowTile tile, const float* in, float* out) {
  extern __shared__ float4 row_smem[];
  const int k = first + blockIdx.z;
  const int s = p.slice_of ? p.slice_of[k] : k;
  const int R = p.radius_x[k], taps = row_taps(R);
  const int x0 = blockIdx.x * tile.cols, y0 = blockIdx.y * tile.rows;
  const int rows = min(tile.rows, p.rows - y0), stride = row_stride_floats(tile.cols, p.max_radius);
  // The block's rows in the slice's box, [r_begin, r_end); the rows outside
  // it stay unwritten (the column pass reads zeros for them).
  const SliceBox box = slice_box_of<kBoxed>(p.slice_box, s, p.rows, p.cols);
  const int r_begin = max(0, box.row_begin - y0), r_end = min(rows, box.row_end - y0);
  if (r_begin >= r_end) return;
  float* weights = reinterpret_cast<float*>(row_smem);     // taps: wx[|u − R|], 0 beyond 2R
  float* segments = weights + row_taps(p.max_radius);      // rows × stride: in[y0 + r][x0 − R + i]
  for (int u = threadIdx.x; u < taps; u += kRowThreads)
    weights[u] = u <= 2 * R ? p.weights_x[k * (p.max_radius + 1) + abs(u - R)] : 0.0f;
  // One team of threads per row (a warp each from 8 rows up), each thread with
  // kLoadBatch loads in flight: issued before their stores (a guarded load and
  // store after another measured latency-bound). Samples outside the box's
  // columns (and so outside [0, cols)) are 0.
  const int teams = min(r_end - r_begin, kRowThreads / 32), team = kRowThreads / teams, length = tile.cols + taps;
  // x is read where x − col_begin < x_count, unsigned (col_begin = 0 without boxes).
  const unsigned x_begin = box.col_begin;
  const unsigned x_count = max(0, min(box.col_end, x0 - R + length) - box.col_begin);
  for (int r = r_begin + threadIdx.x / team; r < r_end; r += teams) {
    const float* row_in = in + (static_cast<std::size_t>(s) * p.rows + y0 + r) * p.cols;
    float* segment = segments + r * stride;
    for (int i0 = threadIdx.x % team; i0 < length; i0 += kLoadBatch * team) {
      float v[kLoadBatch];
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b) {
        const int x = x0 - R + i0 + b * team;
        v[b] = static_cast<unsigned>(x) - x_begin < x_count ? row_in[x] : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kLoadBatch; ++b)
        if (i0 + b * team < length) segment[i0 + b * team] = v[b];
    }
  }
  __syncthreads();
  // Items (row r, group g of 4 outputs), kRowThreads apart: stepped without a division each.
  const int groups = tile.cols / kRowOutputs, step_r = kRowThreads / groups, step_g = kRowThreads % groups;
  const bool aligned = p.cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(out) % sizeof(float4) == 0;
  for (int r = r_begin + threadIdx.x / groups, g = threadIdx.x % groups; r < r_end;) {
    const int x = x0 + g * kRowOutputs;
    if (x < p.cols) {
      const float4* samples = reinterpret_cast<const float4*>(segments + r * stride) + g;
      const float4* weights4 = reinterpret_cast<const float4*>(weights);
      float sum[kRowOutputs] = {};
      float4 lo = samples[0];
#pragma unroll 2
      for (int c = 0; c < taps / 4; ++c) {
        const float4 hi = samples[c + 1];
        accumulate_4x4(sum, lo, hi, weights4[c]);
        lo = hi;
      }
      float* row_out = out + (static_cast<std::size_t>(k) * p.rows + y0 + r) * p.cols + x;
      if (aligned) {
        *reinterpret_cast<float4*>(row_out) = make_float4(sum[0], sum[1], sum[2], sum[3]);
      } else {
#pragma unroll
        for (int j = 0; j < kRowOutputs; ++j)
          if (x + j < p.cols) row_out[j] = sum[j];
      }
    }
    r += step_r;
    g += step_g;
    if (g >= groups) g -= groups, ++r;
  }
}

/// The column passes' shared memory for one slice (entry k of the params,
/// radius R): its weights wy[|u − R|] and the tile's column `x` with an
/// apron of R rows (whole 8-row blocks), zeros outside the plane.
/// Rows outside the slice's box (`box`: slice_box_of its stack slice) are
/// zeros: the row pass left them unwritten.
__device__ __forceinline__ void load_column_tile(const ConvolutionParams& p, int k, const SliceBox& box, int R,
                                                 int rows, int y0, int x, bool inside, const float* in,
                                                 float* weights, float* tile) {
  const int tid = threadIdx.y * kColumnTileCols + threadIdx.x;
  for (int u = tid; u <= 2 * R; u += kColumnTileCols * kColumnThreadRows)
    weights[u] = p.weights_y[k * (p.max_radius + 1) + abs(u - R)];
  // The rows that the tile's threads read: whole 8-row blocks and the apron.
  const int loaded_rows = (rows + kColumnOutputs - 1) / kColumnOutputs * kColumnOutputs + 2 * R;
  const float* column_in = in + static_cast<std::size_t>(k) * p.rows * p.cols + x;
  const unsigned y_begin = box.row_begin, y_count = box.row_end - box.row_begin;  // 0 and rows without boxes
#pragma unroll 8
  for (int r = threadIdx.y; r < loaded_rows; r += kColumnThreadRows) {
    const unsigned y = y0 - R + r;  // y − y_begin < y_count: inside the box's rows (and the plane)
    tile[r * kColumnTileCols + threadIdx.x] =
        inside && y - y_begin < y_count ? column_in[static_cast<std::size_t>(y) * p.cols] : 0.0f;
  }
}

/// sum[j] = Σ_u w[u] · column[(j + u) · kColumnTileCols], u = 0 … 2R: 8
/// adjacent outputs of a column through a window of 8 samples sliding down
/// the taps. Unrolled by the window's length, the shifts are register
/// renames, not moves.
__device__ __forceinline__ void column_sums(const float* column, const float* weights, int R,
                                            float (&sum)[kColumnOutputs]) {
  float window[kColumnOutputs];
#pragma unroll
  for (int j = 0; j < kColumnOutputs; ++j) sum[j] = 0.0f;
#pragma unroll
  for (int j = 1; j < kColumnOutputs; ++j) window[j] = column[(j - 1) * kColumnTileCols];
#pragma unroll 8
  for (int u = 0; u <= 2 * R; ++u) {  // window[j]: output j's sample at tap u
#pragma unroll
    for (int j = 0; j + 1 < kColumnOutputs; ++j) window[j] = window[j + 1];
    window[kColumnOutputs - 1] = column[(u + kColumnOutputs - 1) * kColumnTileCols];
    const float w = weights[u];
#pragma unroll
    for (int j = 0; j < kColumnOutputs; ++j) sum[j] = fmaf(w, window[j], sum[j]);
  }
}

/// Column pass: a 32 × 128 output tile with an apron of R rows above and below;
/// reads intermediate k, writes output slice s (ConvolutionParams::slice_of),
/// the only writer of each of its pixels. Each thread sums blocks of 8 adjacent
/// rows of its column through a window of 8 samples sliding down the taps, so
/// that one shared sample and one weight feed 8 FMAs (the measured pass spent 2
/// shared loads, an add and an FMA per output and tap pair).
// With boxes (the engine's deterministic mode) one block fewer per SM: at 6,
// ≤ 40 registers, the box's rows spilled.
template <bool kBoxed>
__global__ void __launch_bounds__(kColumnTileCols * kColumnThreadRows, kSeparableBlocksPerSm - (kBoxed ? 1 : 0))
    convolve_columns_kernel(ConvolutionParams p, int first, const float* in, float* out) {
  extern __shared__ float smem[];
  const int k = first + blockIdx.z;
  const int s = p.slice_of ? p.slice_of[k] : k;
  const int x = blockIdx.x * kColumnTileCols + threadIdx.x;
  const int y0 = blockIdx.y * kColumnTileRows;
  const int R = p.radius_y[k];
  const int rows = min(kColumnTileRows, p.rows - y0);
  float* weights = smem;                      // 2R + 1: wy[|u − R|]
  float* tile = smem + 2 * p.max_radius + 1;  // (kColumnTileRows + 2R) × kColumnTileCols
  const bool inside = x < p.cols;
  load_column_tile(p, k, slice_box_of<kBoxed>(p.slice_box, s, p.rows, p.cols), R, rows, y0, x, inside, in, weights,
                   tile);
  __syncthreads();
  if (!inside) return;
  const double scale = p.out_fixed ? *p.fixed_scale : 0.0;
  for (int r0 = threadIdx.y * kColumnOutputs; r0 < rows; r0 += kColumnThreadRows * kColumnOutputs) {
    float sum[kColumnOutputs];
    column_sums(tile + r0 * kColumnTileCols + threadIdx.x, weights, R, sum);  // tile row r0: image row y0 + r0 − R
#pragma unroll
    for (int j = 0; j < kColumnOutputs; ++j) {
      if (r0 + j >= rows) break;
      const std::size_t i = (static_cast<std::size_t>(s) * p.rows + y0 + r0 + j) * p.cols + x;
      if (p.out_fixed)
        p.out_fixed[i] = to_fixed(sum[j], scale);
      else
        out[i] = sum[j];
    }
  }
}

/// Column pass into groups of slices (SuperpositionInput::groups): block
/// (32 × 128 output tile, group g = blockIdx.z) adds to out[g] the group's
/// member slices one after another, each as convolve_columns_kernel computes
/// it from the row pass's intermediate (uniform slices: uniform_index[slice]
/// = k ≥ 0) or as the scatter left it in `scattered` (the others, −1): the
/// same float sums, added in the same order as a pass over the ungrouped
/// output would add them — without writing the uniform slices' output and
/// reading it back (the engine's water cube: 0.78 GB of traffic per beam).
/// The group's sums stay in shared memory (16 per thread): in registers, on
/// top of the pass's window and sums, they spilled even at 80 registers.
/// 4 blocks per SM (≤ 64 registers; 6 spilled, and their shared memory, 38 KB
/// a block at the water cube's r 21, would not fit 6 anyway).
constexpr int kGroupedPasses = kColumnTileRows / (kColumnThreadRows * kColumnOutputs);  // 8-row blocks per thread
constexpr int kMemberChunk = 32;  // members whose slice, entry, radius and box a block reads at once
constexpr int kGroupedSumFloats = kGroupedPasses * kColumnOutputs * kColumnTileCols * kColumnThreadRows;

int grouped_column_shared_bytes(int max_radius) {
  return column_shared_bytes(max_radius) + kGroupedSumFloats * static_cast<int>(sizeof(float));
}

template <bool kBoxed>
__global__ void __launch_bounds__(kColumnTileCols * kColumnThreadRows, 4)
    convolve_columns_grouped_kernel(ConvolutionParams p, GroupedColumns g, int first_group, const float* in) {
  extern __shared__ float smem[];
  constexpr int kThreads = kColumnTileCols * kColumnThreadRows;
  const int group = first_group + blockIdx.z;
  const int x = blockIdx.x * kColumnTileCols + threadIdx.x;
  const int y0 = blockIdx.y * kColumnTileRows;
  const int rows = min(kColumnTileRows, p.rows - y0);
  const bool inside = x < p.cols;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  const std::size_t tile_origin = static_cast<std::size_t>(y0) * p.cols + x;
  const int tid = threadIdx.y * kColumnTileCols + threadIdx.x;
  float* acc = smem;                                // [pass · 8 + j][thread]: output row (ty + 8·pass)·8 + j
  float* weights = smem + kGroupedSumFloats;        // 2R + 1: wy[|u − R|]
  float* tile = weights + 2 * p.max_radius + 1;     // (kColumnTileRows + 2R) × kColumnTileCols
  // Output row of the thread's sum q = pass · 8 + j.
  const auto row_of = [](int q) { return (static_cast<int>(threadIdx.y) + q / kColumnOutputs * kColumnThreadRows) *
                                             kColumnOutputs + q % kColumnOutputs; };
  float* group_out = g.groups.out + static_cast<std::size_t>(group) * plane + tile_origin;
#pragma unroll 4
  for (int q = 0; q < kGroupedPasses * kColumnOutputs; ++q) {
    const int r = row_of(q);
    acc[q * kThreads + tid] = inside && r < rows ? group_out[static_cast<std::size_t>(r) * p.cols] : 0.0f;
  }
  // The members' slice, entry, radius and box, kMemberChunk at a time into
  // shared memory, each chunk with one round of loads: read per member, they
  // were three dependent global loads (slice → entry → radius, and the box)
  // before its tile's loads could start (~8 % of the kernel's stall samples,
  // water cube, H100).
  __shared__ int member_slice[kMemberChunk], member_entry[kMemberChunk], member_radius[kMemberChunk];
  __shared__ SliceBox member_box[kMemberChunk];
  const int member_end = g.groups.member_begin[group + 1];
  for (int m = g.groups.member_begin[group]; m < member_end; ++m) {
    const int c = (m - g.groups.member_begin[group]) % kMemberChunk;
    if (c == 0) {
      __syncthreads();  // the last chunk's entries are no longer read
      if (tid < kMemberChunk && m + tid < member_end) {
        const int slice = g.groups.member_slices[m + tid];
        const int entry = g.uniform_index[slice];
        member_slice[tid] = slice;
        member_entry[tid] = entry;
        member_radius[tid] = entry >= 0 ? p.radius_y[entry] : 0;
        member_box[tid] = slice_box_of<kBoxed>(p.slice_box, slice, p.rows, p.cols);
      }
      __syncthreads();
    }
    const int s = member_slice[c];
    const int k = member_entry[c];  // the same for the whole block
    if (k < 0) {  // a scattered (or empty) slice: its output as the scatter left it
      const float* from = g.scattered + static_cast<std::size_t>(s) * plane + tile_origin;
#pragma unroll 4
      for (int q = 0; q < kGroupedPasses * kColumnOutputs; ++q) {
        const int r = row_of(q);
        if (inside && r < rows) acc[q * kThreads + tid] += from[static_cast<std::size_t>(r) * p.cols];
      }
      continue;
    }
    const int R = member_radius[c];
    __syncthreads();  // the previous member's tile is no longer read
    load_column_tile(p, k, member_box[c], R, rows, y0, x, inside, in, weights, tile);
    __syncthreads();
    if (!inside) continue;
#pragma unroll 1
    for (int pass = 0; pass < kGroupedPasses; ++pass) {
      const int r0 = (threadIdx.y + pass * kColumnThreadRows) * kColumnOutputs;
      if (r0 >= rows) break;
      float sum[kColumnOutputs];  // convolve_columns_kernel's sums, term for term
      column_sums(tile + r0 * kColumnTileCols + threadIdx.x, weights, R, sum);
#pragma unroll
      for (int j = 0; j < kColumnOutputs; ++j) acc[(pass * kColumnOutputs + j) * kThreads + tid] += sum[j];
    }
  }
#pragma unroll 4
  for (int q = 0; q < kGroupedPasses * kColumnOutputs; ++q) {
    const int r = row_of(q);
    if (inside && r < rows) group_out[static_cast<std::size_t>(r) * p.cols] = acc[q * kThreads + tid];
  }
}

/// Direct 2D, one thread per output pixel, image from global memory; the 2D
/// kernel from global memory (kKernelInConstantMemory = false, report 1's first
/// design) or from constant memory, broadcast to the warp (true).
template <bool kKernelInConstantMemory>
__global__ void convolve_direct_kernel(ConvolutionParams p, const float* in, float* out, const float* kernel_2d,
                                       int R) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int s = blockIdx.z;
  if (x >= p.cols || y >= p.rows) return;
  const float* plane_in = in + static_cast<std::size_t>(s) * p.rows * p.cols;
  const float* weights = kKernelInConstantMemory ? c_kernel_2d : kernel_2d;
  const int width = 2 * R + 1;
  float sum = 0.0f;
  for (int dy = -R; dy <= R; ++dy) {
    const int yi = y + dy;
    if (yi < 0 || yi >= p.rows) continue;
    for (int dx = -R; dx <= R; ++dx) {
      const int xi = x + dx;
      if (xi < 0 || xi >= p.cols) continue;
      sum += plane_in[static_cast<std::size_t>(yi) * p.cols + xi] * weights[(dy + R) * width + dx + R];
    }
  }
  out[(static_cast<std::size_t>(s) * p.rows + y) * p.cols + x] = sum;
}

/// Direct 2D over a shared-memory tile with its apron, kernel in constant memory.
__global__ void convolve_direct_shared_kernel(ConvolutionParams p, const float* in, float* out, int R) {
  extern __shared__ float tile[];  // (kDirectTile + 2R)²
  const int s = blockIdx.z;
  const int x0 = blockIdx.x * kDirectTile, y0 = blockIdx.y * kDirectTile;
  const int side = kDirectTile + 2 * R;
  const float* plane_in = in + static_cast<std::size_t>(s) * p.rows * p.cols;
  for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < side * side; i += blockDim.x * blockDim.y) {
    const int y = y0 - R + i / side, x = x0 - R + i % side;
    tile[i] = (x >= 0 && x < p.cols && y >= 0 && y < p.rows)
                  ? plane_in[static_cast<std::size_t>(y) * p.cols + x] : 0.0f;
  }
  __syncthreads();
  const int width = 2 * R + 1;
  const int x = x0 + threadIdx.x;
  for (int r = threadIdx.y; r < kDirectTile; r += blockDim.y) {
    const int y = y0 + r;
    if (x >= p.cols || y >= p.rows) continue;
    float sum = 0.0f;
    for (int dy = 0; dy < width; ++dy)
      for (int dx = 0; dx < width; ++dx)
        sum += tile[(r + dy) * side + threadIdx.x + dx] * c_kernel_2d[dy * width + dx];
    out[(static_cast<std::size_t>(s) * p.rows + y) * p.cols + x] = sum;
  }
}

/// Both instantiations of the separable passes (with and without slice boxes).
template <bool kBoxed>
void set_separable_shared_memory_limits(int row_bytes, int radius) {
  PD_CUDA_CHECK(
      cudaFuncSetAttribute(convolve_rows_kernel<kBoxed>, cudaFuncAttributeMaxDynamicSharedMemorySize, row_bytes));
  PD_CUDA_CHECK(cudaFuncSetAttribute(convolve_columns_kernel<kBoxed>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     column_shared_bytes(radius)));
  PD_CUDA_CHECK(cudaFuncSetAttribute(convolve_columns_grouped_kernel<kBoxed>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, grouped_column_shared_bytes(radius)));
}

}  // namespace

void set_convolution_shared_memory_limits(int max_radius) {
  static PerDeviceSetting configured_radius;
  configured_radius.raise_to(max_radius, [](int radius) {
    // The most any row tile needs: rows · cols ≤ kRowOutputs · kRowGroupsPerBlock, rows ≤ kMaxRowTileRows.
    const int row_bytes = (row_shared_floats({kMaxRowTileRows, 0}, radius) + kRowOutputs * kRowGroupsPerBlock) *
                          static_cast<int>(sizeof(float));
    set_separable_shared_memory_limits<false>(row_bytes, radius);
    set_separable_shared_memory_limits<true>(row_bytes, radius);
  });
}

constexpr int kMaxGridZ = 65535;

template <bool kBoxed>
void launch_rows(const ConvolutionParams& p, const float* in, float* scratch, cudaStream_t stream) {
  const RowTile tile = row_tile(p.rows, p.cols);
  const int row_bytes = row_shared_floats(tile, p.max_radius) * static_cast<int>(sizeof(float));
  for (int first = 0; first < p.slices; first += kMaxGridZ) {
    const int n = std::min(kMaxGridZ, p.slices - first);
    convolve_rows_kernel<kBoxed>
        <<<dim3((p.cols + tile.cols - 1) / tile.cols, (p.rows + tile.rows - 1) / tile.rows, n), kRowThreads,
           row_bytes, stream>>>(p, first, tile, in, scratch);
    PD_CUDA_CHECK_LAUNCH("convolve_rows_kernel");
  }
}

template <bool kBoxed>
void launch_columns(const ConvolutionParams& p, const float* scratch, float* out, cudaStream_t stream) {
  const int column_bytes = column_shared_bytes(p.max_radius);
  for (int first = 0; first < p.slices; first += kMaxGridZ) {
    const int n = std::min(kMaxGridZ, p.slices - first);
    convolve_columns_kernel<kBoxed><<<dim3((p.cols + kColumnTileCols - 1) / kColumnTileCols,
                                           (p.rows + kColumnTileRows - 1) / kColumnTileRows, n),
                                      dim3(kColumnTileCols, kColumnThreadRows), column_bytes, stream>>>(p, first,
                                                                                                        scratch, out);
    PD_CUDA_CHECK_LAUNCH("convolve_columns_kernel");
  }
}

template <bool kBoxed>
void launch_grouped(const ConvolutionParams& p, const GroupedColumns& g, const float* scratch, cudaStream_t stream) {
  const int column_bytes = grouped_column_shared_bytes(p.max_radius);
  for (int first = 0; first < g.groups.count; first += kMaxGridZ) {
    const int n = std::min(kMaxGridZ, g.groups.count - first);
    convolve_columns_grouped_kernel<kBoxed><<<dim3((p.cols + kColumnTileCols - 1) / kColumnTileCols,
                                                   (p.rows + kColumnTileRows - 1) / kColumnTileRows, n),
                                              dim3(kColumnTileCols, kColumnThreadRows), column_bytes, stream>>>(
        p, g, first, scratch);
    PD_CUDA_CHECK_LAUNCH("convolve_columns_grouped_kernel");
  }
}

void launch_separable_rows(const ConvolutionParams& p, const float* in, float* scratch, cudaStream_t stream) {
  if (p.slice_box) launch_rows<true>(p, in, scratch, stream);
  else launch_rows<false>(p, in, scratch, stream);
}

void launch_separable(const ConvolutionParams& p, const float* in, float* scratch, float* out,
                      cudaStream_t stream) {
  launch_separable_rows(p, in, scratch, stream);
  if (p.slice_box) launch_columns<true>(p, scratch, out, stream);
  else launch_columns<false>(p, scratch, out, stream);
}

void launch_grouped_columns(const ConvolutionParams& p, const GroupedColumns& g, const float* scratch,
                            cudaStream_t stream) {
  if (p.slice_box) launch_grouped<true>(p, g, scratch, stream);
  else launch_grouped<false>(p, g, scratch, stream);
}

void upload_constant_kernel(const std::vector<float>& kernel_2d) {
  if (kernel_2d.size() > sizeof(c_kernel_2d) / sizeof(float))
    throw InputError("direct convolution: the 2D kernel does not fit constant memory (radius > 63 px)");
  PD_CUDA_CHECK(cudaMemcpyToSymbol(c_kernel_2d, kernel_2d.data(), kernel_2d.size() * sizeof(float)));
}

void launch_direct(ConvolutionMethod method, const ConvolutionParams& p, const float* in, float* out,
                   const float* d_kernel_2d, int radius, cudaStream_t stream) {
  const dim3 block(32, 8);
  const dim3 grid((p.cols + 31) / 32, (p.rows + 7) / 8, p.slices);
  switch (method) {
    case ConvolutionMethod::kGpuDirectGlobal:
      convolve_direct_kernel<false><<<grid, block, 0, stream>>>(p, in, out, d_kernel_2d, radius);
      break;
    case ConvolutionMethod::kGpuDirectConstant:
      convolve_direct_kernel<true><<<grid, block, 0, stream>>>(p, in, out, nullptr, radius);
      break;
    case ConvolutionMethod::kGpuDirectSharedTile: {
      const int side = kDirectTile + 2 * radius;
      const int bytes = side * side * static_cast<int>(sizeof(float));
      PD_CUDA_CHECK(cudaFuncSetAttribute(convolve_direct_shared_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      convolve_direct_shared_kernel<<<dim3((p.cols + kDirectTile - 1) / kDirectTile,
                                           (p.rows + kDirectTile - 1) / kDirectTile, p.slices),
                                      block, bytes, stream>>>(p, in, out, radius);
      break;
    }
    default: throw InternalError("launch_direct: not a direct method");
  }
  PD_CUDA_CHECK_LAUNCH("convolve_direct");
}

// ---------------------------------------------------------------- host-side preparation

PreparedConvolution prepare_convolution(ConvolutionMethod method, const UniformSigmaInput& input,
                                        const SuperpositionOptions& options) {
  const float cutoff = static_cast<float>(options.cutoff_sigmas);
  PreparedConvolution prep;
  const int slices = input.shape.slices;
  for (int s = 0; s < slices; ++s) {
    prep.radius_x.push_back(gaussian_radius_px(input.sigma_x_px.data[s], cutoff));
    prep.radius_y.push_back(gaussian_radius_px(input.sigma_y_px.data[s], cutoff));
  }
  prep.max_radius = std::max(*std::max_element(prep.radius_x.begin(), prep.radius_x.end()),
                             *std::max_element(prep.radius_y.begin(), prep.radius_y.end()));
  const int stride = prep.max_radius + 1;
  prep.weights_x.assign(static_cast<std::size_t>(slices) * stride, 0.0f);
  prep.weights_y.assign(static_cast<std::size_t>(slices) * stride, 0.0f);
  for (int s = 0; s < slices; ++s) {
    for (int d = 0; d <= prep.radius_x[s]; ++d)
      prep.weights_x[s * stride + d] = static_cast<float>(pixel_integrated_gaussian(d, input.sigma_x_px.data[s]));
    for (int d = 0; d <= prep.radius_y[s]; ++d)
      prep.weights_y[s * stride + d] = static_cast<float>(pixel_integrated_gaussian(d, input.sigma_y_px.data[s]));
  }
  if (method != ConvolutionMethod::kGpuSeparable) {
    for (int s = 1; s < slices; ++s)
      if (input.sigma_x_px.data[s] != input.sigma_x_px.data[0] || input.sigma_y_px.data[s] != input.sigma_y_px.data[0])
        throw InputError(std::string("convolution method '") + method_name(method) +
                         "' needs one sigma for the whole stack; slice " + std::to_string(s) + " differs");
    if (method != ConvolutionMethod::kGpuDirectGlobal && prep.max_radius > kMaxConstantRadius)
      throw InputError(std::string("convolution method '") + method_name(method) + "' supports radii up to " +
                       std::to_string(kMaxConstantRadius) + " px; this stack needs " +
                       std::to_string(prep.max_radius));
    // The 2D kernel of the direct designs: one square of (2R+1)² products, R = max radius.
    const int R = prep.max_radius, width = 2 * R + 1;
    prep.kernel_2d.assign(static_cast<std::size_t>(width) * width, 0.0f);
    for (int dy = -R; dy <= R; ++dy)
      for (int dx = -R; dx <= R; ++dx)
        if (std::abs(dx) <= prep.radius_x[0] && std::abs(dy) <= prep.radius_y[0])
          prep.kernel_2d[(dy + R) * width + dx + R] =
              static_cast<float>(pixel_integrated_gaussian(dx, input.sigma_x_px.data[0]) *
                                 pixel_integrated_gaussian(dy, input.sigma_y_px.data[0]));
  }
  return prep;
}

namespace {

class GpuConvolver final : public Convolver {
 public:
  GpuConvolver(ConvolutionMethod method, const SuperpositionOptions& options) : method_(method), options_(options) {
    if (gpu_device_count() == 0)
      throw UnavailableError(std::string("convolution method '") + method_name(method) +
                             "' needs a CUDA device, and none is present");
  }
  ConvolutionMethod method() const override { return method_; }

  void convolve(const UniformSigmaInput& input, float* output) override {
    validate_uniform_sigma_input(input, options_);
    DeviceConvolution run(method_, input, options_);
    const std::size_t n = input.shape.pixel_count();
    DeviceBuffer<float> d_in(n), d_out(n);
    PD_CUDA_CHECK(cudaMemcpy(d_in.get(), input.image.data, n * sizeof(float), cudaMemcpyHostToDevice));
    run.launch(d_in.get(), d_out.get(), nullptr);
    PD_CUDA_CHECK(cudaDeviceSynchronize());
    PD_CUDA_CHECK(cudaMemcpy(output, d_out.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  }

 private:
  ConvolutionMethod method_;
  SuperpositionOptions options_;
};

}  // namespace

DeviceConvolution::DeviceConvolution(ConvolutionMethod method, const UniformSigmaInput& input,
                                     const SuperpositionOptions& options)
    : method_(method), prep_(prepare_convolution(method, input, options)) {
  params_.slices = input.shape.slices;
  params_.rows = input.shape.rows;
  params_.cols = input.shape.cols;
  params_.max_radius = prep_.max_radius;
  const std::size_t slices = static_cast<std::size_t>(params_.slices);
  const std::size_t stride = static_cast<std::size_t>(prep_.max_radius + 1);
  radii_.reserve(2 * slices);
  weights_.reserve(2 * slices * stride);
  PD_CUDA_CHECK(cudaMemcpy(radii_.get(), prep_.radius_x.data(), slices * sizeof(int), cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaMemcpy(radii_.get() + slices, prep_.radius_y.data(), slices * sizeof(int), cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaMemcpy(weights_.get(), prep_.weights_x.data(), slices * stride * sizeof(float), cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaMemcpy(weights_.get() + slices * stride, prep_.weights_y.data(), slices * stride * sizeof(float),
                           cudaMemcpyHostToDevice));
  params_.radius_x = radii_.get();
  params_.radius_y = radii_.get() + slices;
  params_.weights_x = weights_.get();
  params_.weights_y = weights_.get() + slices * stride;
  if (method == ConvolutionMethod::kGpuSeparable) {
    set_convolution_shared_memory_limits(prep_.max_radius);
    scratch_.reserve(input.shape.pixel_count());
  } else if (method == ConvolutionMethod::kGpuDirectGlobal) {
    kernel_.reserve(prep_.kernel_2d.size());
    PD_CUDA_CHECK(cudaMemcpy(kernel_.get(), prep_.kernel_2d.data(), prep_.kernel_2d.size() * sizeof(float),
                             cudaMemcpyHostToDevice));
  } else {
    upload_constant_kernel(prep_.kernel_2d);
  }
}

void DeviceConvolution::launch(const float* d_in, float* d_out, cudaStream_t stream) {
  if (method_ == ConvolutionMethod::kGpuSeparable)
    launch_separable(params_, d_in, scratch_.get(), d_out, stream);
  else
    launch_direct(method_, params_, d_in, d_out, kernel_.get(), prep_.max_radius, stream);
}

}  // namespace protondose::cuda

namespace protondose {

std::unique_ptr<Convolver> make_gpu_convolver(ConvolutionMethod method, const SuperpositionOptions& options) {
  if (method == ConvolutionMethod::kCpuSeparable) throw InternalError("make_gpu_convolver: CPU method");
  return std::make_unique<cuda::GpuConvolver>(method, options);
}

}  // namespace protondose
