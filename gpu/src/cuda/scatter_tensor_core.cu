// The kernel superposition on the tensor cores (issue "beyond the
// shared-memory ceiling"), in CUB order: launchers (bottom) → kernel →
// device helpers (top).
//
// The paper's scatter spends one shared-memory read-modify-write per tap and
// stops at 16 taps per SM per clock. Written as matrix products, the same sum
// runs on the tensor cores instead. Take one source row y of a tile and 8
// consecutive pixels x_k = xb + k of it. Their contributions to a 16 × 8 block
// of outputs (columns X = Xb + m, rows Y = Yb + n) are
//
//   C[m][n] = Σ_k  A[m][k] · B[k][n],
//   A[m][k] = K(Xb + m − x_k, σx(x_k, y))              (16 × 8: horizontal weights)
//   B[k][n] = I(x_k, y) · K(Yb + n − y, σy(x_k, y))     (8 × 8: value × vertical weight)
//
// — one mma.sync.m16n8k8 per block, each pixel keeping its own σx and σy. A
// pixel's kernel reaches 2R+1 columns, so A is banded and a block is computed
// only where the band meets it (37 % of the products are inside the band at
// R = 8, 57 % at R = 16). The tensor cores take TF32 operands (10-bit
// mantissa); each operand is split into a high TF32 part and the remainder,
// and the three products hi·hi + hi·lo + lo·hi keep the sum at float accuracy
// (the neglected lo·lo is 2⁻²² of it).
//
// Numerics of the accumulation: the tensor cores' FP32 accumulation is not
// round-to-nearest, so a long chain of mma into one accumulator can drift by
// an ulp per step. Each source row's products therefore go into fresh
// accumulators (a chain of at most 3 × 5 mma), which are then added to the
// running sums with ordinary float additions.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "protondose/core/error.h"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/per_device_setting.cuh"
#include "superposition_device.cuh"
#include "superposition_kernels.cuh"

namespace protondose::cuda {
namespace {

// ---------------------------------------------------------------- layout

/// Four warps per tile; warp w owns one quadrant of the tile's output blocks
/// (left/right half of the 16-column blocks × top/bottom half of the 8-row
/// blocks). The band makes the four quadrants equally busy (each 1/4 of the
/// block products at R = 8·RB).
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;
/// The weight tables are built for this many source rows of the tile at a time.
constexpr int kChunkRows = 8;
constexpr int kChunkPixels = kChunkRows * kTileCols;
/// Row stride (floats) of the tables [d][pixel]: ≡ 4 (mod 32), so that the 32
/// lanes' fragment loads (8 consecutive d × 4 consecutive pixels) fall in 32
/// different banks.
constexpr int kTableStride = kChunkPixels + 4;
static_assert(kTableStride % 32 == 4, "fragment loads would conflict");
static_assert(kTileRows % kChunkRows == 0, "chunks must cover the tile");
static_assert(kTileCols == 32, "the tile is four 8-pixel groups wide");

/// Sizes for the radius class RB: tiles of radius R ≤ 8·RB.
template <int RB>
struct MmaGeometry {
  static constexpr int kRadiusMax = 8 * RB;
  /// Table entries d = 0 … kRadiusMax, then a zero sentinel that every larger
  /// |d| is clamped to.
  static constexpr int kTableEntries = kRadiusMax + 2;
  /// 16-column output blocks left of the tile: they cover x0 − kRadiusMax.
  static constexpr int kColumnHalo = (kRadiusMax + 15) / 16;
  static constexpr int kColumnBlocks = 2 + 2 * kColumnHalo;  ///< cover [x0 − R, x0 + 31 + R]
  static constexpr int kRowBlocks = 2 + 2 * RB;              ///< 8-row blocks over [y0 − R, y0 + 15 + R]
  static constexpr int kWarpColumnBlocks = kColumnBlocks / 2;
  static constexpr int kWarpRowBlocks = kRowBlocks / 2;
  static constexpr int kSharedBytes = 2 * kTableEntries * kTableStride * static_cast<int>(sizeof(float));
};

// ---------------------------------------------------------------- device helpers

/// TF32 high part (round to nearest) and the exact float remainder, whose own
/// low bits the tensor core drops (≤ 2⁻²¹ of x).
__device__ inline void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  uint32_t h;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(x));
  hi = h;
  lo = __float_as_uint(x - __uint_as_float(h));
}

/// d[16×8] += a[16×8] · b[8×8] on the tensor cores (TF32 in, FP32 accumulate).
/// Fragments (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4:
/// a = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; b = B[t][g], B[t+4][g];
/// d = C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
__device__ inline void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Index of |d| in a weight table: d itself up to kRadiusMax, else the zero sentinel.
template <int kRadiusMax>
__device__ inline int table_row(int d) {
  return min(abs(d), kRadiusMax + 1);
}

/// Column `pixel` of a [d][kTableStride] table: scale · K(d, σ) for d = 0 …
/// min(r, kRadiusMax), 0 beyond (the pixel's own cut-off) and in the sentinel.
/// The weights are gaussian_weight's, one erfc per d (each K(d) is a
/// difference of two neighbouring erfc values). scale = 0 writes zeros.
template <int kRadiusMax>
__device__ inline void write_weight_column(float* table, int pixel, float sigma_px, float cutoff_sigmas,
                                           float scale) {
  int r = -1;
  if (scale != 0.0f) r = min(gaussian_radius_px(sigma_px, cutoff_sigmas), kRadiusMax);
  if (r >= 0) {
    const float a = erf_scale(sigma_px);
    if (a == 0.0f) {
      table[pixel] = scale;  // σ ≈ 0: local deposit, r = 0
    } else {
      float upper = erfcf(0.5f * a);  // erfc((d + ½)·a) for d = 0
      table[pixel] = scale * (1.0f - upper);
      for (int d = 1; d <= r; ++d) {
        const float next = erfcf((d + 0.5f) * a);
        table[d * kTableStride + pixel] = scale * (0.5f * (upper - next));
        upper = next;
      }
    }
  }
#pragma unroll 1
  for (int d = r + 1; d <= kRadiusMax + 1; ++d) table[d * kTableStride + pixel] = 0.0f;
}

// ---------------------------------------------------------------- kernel

/// One block per bucket tile (32 × 16 source pixels) of radius `radius` ≤ 8·RB.
/// Per chunk of 8 source rows the block writes, for each pixel, its horizontal
/// weights K(d, σx) and its value × vertical weights I·K(d, σy) into shared
/// tables [d][pixel]; then each warp multiplies, row by row and 8 pixels at a
/// time, the fragments of its quadrant of output blocks that the band reaches.
/// The sums stay in registers until one flush per output cell (atomics, as
/// the tile scatter: tiles overlap in their halos).
template <int RB>
__global__ void __launch_bounds__(kMmaThreads)
    scatter_tensor_core_kernel(StackParams p, const int* tile_list, int radius) {
  using G = MmaGeometry<RB>;
  constexpr int WC = G::kWarpColumnBlocks, WR = G::kWarpRowBlocks;
  extern __shared__ float tables[];
  __shared__ unsigned int row_mask[kChunkRows];             // bit i: pixel x0 + i of the row is non-zero
  float* kx = tables;                                       // [d][pixel]: K(d, σx)
  float* kyv = tables + G::kTableEntries * kTableStride;    // [d][pixel]: I · K(d, σy)

  const int tile = tile_list ? tile_list[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int tx = tile % p.tiles_x;
  const int ty = (tile / p.tiles_x) % p.tiles_y;
  const int s = tile / (p.tiles_x * p.tiles_y);
  const int x0 = tx * kTileCols, y0 = ty * kTileRows;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // This warp's output blocks: columns Xb = x0 − 16·halo + 16·(first_column + jj),
  // rows Yb = y0 − 8·RB + 8·(first_row + kk).
  const int first_column = (warp & 1) * WC, first_row = (warp >> 1) * WR;
  const int column_origin = x0 - 16 * G::kColumnHalo + 16 * first_column;
  const int row_origin = y0 - 8 * RB + 8 * first_row;

  float sum[WC][WR][4];
#pragma unroll
  for (int jj = 0; jj < WC; ++jj)
#pragma unroll
    for (int kk = 0; kk < WR; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) sum[jj][kk][q] = 0.0f;

#pragma unroll 1
  for (int chunk = 0; chunk < kTileRows; chunk += kChunkRows) {
    // Weight tables of the chunk's pixels (one pixel per thread per pass:
    // warp w builds rows w, w + 4; pixels outside the slice are zeros).
    static_assert(kChunkPixels % kMmaThreads == 0, "every warp builds whole rows");
    for (int q = threadIdx.x; q < kChunkPixels; q += kMmaThreads) {
      const int x = x0 + q % kTileCols, y = y0 + chunk + q / kTileCols;
      float v = 0.0f, sx = 0.0f, sy = 0.0f;
      if (x < p.cols && y < p.rows) {
        const std::size_t i = s * plane + static_cast<std::size_t>(y) * p.cols + x;
        v = p.image[i];
        sx = p.sigma_x[i];
        sy = p.sigma_y[i];
      }
      write_weight_column<G::kRadiusMax>(kx, q, sx, p.cutoff_sigmas, v != 0.0f ? 1.0f : 0.0f);
      write_weight_column<G::kRadiusMax>(kyv, q, sy, p.cutoff_sigmas, v);
      const unsigned int nonzero = __ballot_sync(0xffffffffu, v != 0.0f);
      if (lane == 0) row_mask[q / kTileCols] = nonzero;
    }
    __syncthreads();

#pragma unroll 1
    for (int row = 0; row < kChunkRows; ++row) {
      const int y = y0 + chunk + row;
      if (y >= p.rows) break;  // the same for the whole block: no barrier inside this loop
      const unsigned int mask = row_mask[row];
      if (mask == 0u) continue;  // an all-zero source row adds nothing
      float part[WC][WR][4];
#pragma unroll
      for (int jj = 0; jj < WC; ++jj)
#pragma unroll
        for (int kk = 0; kk < WR; ++kk)
#pragma unroll
          for (int q = 0; q < 4; ++q) part[jj][kk][q] = 0.0f;

#pragma unroll
      for (int group = 0; group < kTileCols / 8; ++group) {
        if (((mask >> (8 * group)) & 0xffu) == 0u) continue;  // warp-uniform: 8 zero pixels
        const int xb = x0 + 8 * group;
        const int pixel = row * kTileCols + 8 * group + t;  // A column / B row t is pixel xb + t
        // A fragments of this warp's column blocks that the band reaches:
        // A[m][k] = K(c + m − k), c = Xb − xb, m − k ∈ [−7, 15].
        uint32_t a_hi[WC][4], a_lo[WC][4];
        bool column_on[WC];
#pragma unroll
        for (int jj = 0; jj < WC; ++jj) {
          const int c = column_origin + 16 * jj - xb;
          column_on[jj] = c - 7 <= radius && c + 15 >= -radius;
          if (column_on[jj]) {
            const float e0 = kx[table_row<G::kRadiusMax>(c + g - t) * kTableStride + pixel];
            const float e1 = kx[table_row<G::kRadiusMax>(c + g + 8 - t) * kTableStride + pixel];
            const float e2 = kx[table_row<G::kRadiusMax>(c + g - t - 4) * kTableStride + pixel + 4];
            const float e3 = kx[table_row<G::kRadiusMax>(c + g + 4 - t) * kTableStride + pixel + 4];
            split_tf32(e0, a_hi[jj][0], a_lo[jj][0]);
            split_tf32(e1, a_hi[jj][1], a_lo[jj][1]);
            split_tf32(e2, a_hi[jj][2], a_lo[jj][2]);
            split_tf32(e3, a_hi[jj][3], a_lo[jj][3]);
          }
        }
#pragma unroll
        for (int kk = 0; kk < WR; ++kk) {
          // B[k][n] = I·K(e + n) of pixel xb + k, e = Yb − y, n ∈ [0, 7].
          const int e = row_origin + 8 * kk - y;
          if (e > radius || e + 7 < -radius) continue;
          const int d = table_row<G::kRadiusMax>(e + g) * kTableStride + pixel;
          uint32_t b0_hi, b0_lo, b1_hi, b1_lo;
          split_tf32(kyv[d], b0_hi, b0_lo);
          split_tf32(kyv[d + 4], b1_hi, b1_lo);
#pragma unroll
          for (int jj = 0; jj < WC; ++jj) {
            if (!column_on[jj]) continue;
            // Small terms first; the neglected lo·lo is ≤ 2⁻²² of the product.
            mma_tf32(part[jj][kk], a_lo[jj], b0_hi, b1_hi);
            mma_tf32(part[jj][kk], a_hi[jj], b0_lo, b1_lo);
            mma_tf32(part[jj][kk], a_hi[jj], b0_hi, b1_hi);
          }
        }
      }
#pragma unroll
      for (int jj = 0; jj < WC; ++jj)
#pragma unroll
        for (int kk = 0; kk < WR; ++kk)
#pragma unroll
          for (int q = 0; q < 4; ++q) sum[jj][kk][q] += part[jj][kk][q];
    }
    __syncthreads();  // every warp is done with the tables before the next chunk rewrites them
  }

  // Flush: C[m][n] of block (jj, kk) is output column Xb + m, row Yb + n.
#pragma unroll
  for (int jj = 0; jj < WC; ++jj)
#pragma unroll
    for (int kk = 0; kk < WR; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float v = sum[jj][kk][q];
        if (v == 0.0f) continue;
        const int X = column_origin + 16 * jj + g + 8 * (q >> 1);
        const int Y = row_origin + 8 * kk + 2 * t + (q & 1);
        if (X < 0 || X >= p.cols || Y < 0 || Y >= p.rows) continue;  // clipped output grid
        accumulate(p, s * plane + static_cast<std::size_t>(Y) * p.cols + X, v);
      }
}

template <int RB>
void configure_radius_class() {
  PD_CUDA_CHECK(cudaFuncSetAttribute(scatter_tensor_core_kernel<RB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     MmaGeometry<RB>::kSharedBytes));
  PD_CUDA_CHECK(cudaFuncSetAttribute(scatter_tensor_core_kernel<RB>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
}

template <int RB>
void launch_radius_class(int radius, int count, const int* tiles, const StackParams& p, cudaStream_t stream) {
  scatter_tensor_core_kernel<RB><<<count, kMmaThreads, MmaGeometry<RB>::kSharedBytes, stream>>>(p, tiles, radius);
}

}  // namespace

// ---------------------------------------------------------------- launchers

void prepare_tensor_core_kernels() {
  static PerDeviceSetting prepared;
  prepared.once([] {
    configure_radius_class<1>();
    configure_radius_class<2>();
    configure_radius_class<3>();
    configure_radius_class<4>();
  });
}

void launch_scatter_tensor_core_tiles(int radius, int count, const int* tiles, const StackParams& p,
                                      cudaStream_t stream) {
  if (radius < 1 || radius > kMaxTileRadiusPx)
    throw InternalError("tensor-core scatter: radius " + std::to_string(radius) + " px outside 1.." +
                        std::to_string(kMaxTileRadiusPx));
  prepare_tensor_core_kernels();
  switch ((radius + 7) / 8) {
    case 1: launch_radius_class<1>(radius, count, tiles, p, stream); break;
    case 2: launch_radius_class<2>(radius, count, tiles, p, stream); break;
    case 3: launch_radius_class<3>(radius, count, tiles, p, stream); break;
    default: launch_radius_class<4>(radius, count, tiles, p, stream); break;
  }
  PD_CUDA_CHECK_LAUNCH("scatter_tensor_core_kernel");
}

}  // namespace protondose::cuda
