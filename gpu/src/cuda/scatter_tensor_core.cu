// The kernel superposition on the tensor cores (issue "beyond the
// shared-memory ceiling"), in CUB order: launchers (bottom) → kernel →
// device helpers (top).
//
// The paper's scatter spends one shared-memory read-modify-write per tap and
// stops at 16 taps per SM per clock. Written as matrix products, the same sum
// runs on the tensor cores instead. Take one source row y of a tile and 8
// consecutive pixels x_k = xb + k of it. Their contributions to a block of
// 16 output rows Y = Yb + m and 8 output columns X = Xb + n are
//
//   C[m][n] = Σ_k  A[m][k] · B[k][n],
//   A[m][k] = I(x_k, y) · K(Yb + m − y, σy(x_k, y))     (16 × 8: value × vertical weight)
//   B[k][n] = K(Xb + n − x_k, σx(x_k, y))              (8 × 8: horizontal weights)
//
// — one mma.sync.m16n8k8 per block, each pixel keeping its own σx and σy. A
// pixel's kernel reaches 2R+1 rows and columns, so a block is computed only
// where the band meets it (37 % of the products are inside the band at
// R = 8, 57 % at R = 16). The tensor cores take TF32 operands (10-bit
// mantissa); each operand is split into its TF32 truncation and the float
// remainder, and the three products hi·hi + hi·lo + lo·hi keep the sum at
// float accuracy (the neglected lo·lo is ≤ 2⁻²⁰ of it).
//
// Three kernels compute these products: for tiles of radius R ≤ 8 (the
// region two 16-row blocks high) one warp per tile, which loads each
// horizontal weight fragment once for both blocks
// (scatter_tensor_core_warp_kernel); for 8 < R ≤ 16 (three blocks) one warp
// per tile too, its sums in shared memory (scatter_tensor_core_warp_rb2_kernel);
// above, one warp per 16-row block of a tile (scatter_tensor_core_kernel).
//
// Numerics of the accumulation: the tensor cores' FP32 accumulation is not
// round-to-nearest — one chain of mma per output block over a whole tile
// drifted to 1.5·10⁻⁵ of max(O) at r 32 — so by default every few source
// rows (kRowsPerSum) sum into fresh accumulators that are then added in float
// (≤ 3.0·10⁻⁶ of max(O) with one row per sum, ≤ 4.5·10⁻⁶ with the two or
// four used now, against 10⁻⁵ allowed; measured, docs/ks-core.md).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "protondose/core/error.h"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/per_device_setting.cuh"
#include "../half_erfc_walk.h"
#include "../wide_gaussian_series.h"
#include "superposition_device.cuh"
#include "superposition_kernels.cuh"
#include "tf32_mma.cuh"

namespace protondose::cuda {
namespace {

// ---------------------------------------------------------------- layout

/// The weight tables are built for this many source rows of the tile at a
/// time. (4 rows, for twice the occupancy, measured slower: 1.53 → 1.68 ms at
/// r_max 8, 2.90 → 4.17 ms at r_max 16 — twice the barrier phases per tile;
/// docs/ks-core.md.)
constexpr int kChunkRows = 8;
constexpr int kChunkPixels = kChunkRows * kTileCols;
/// Row stride (floats) of the tables [d][pixel]: ≡ 4 (mod 32), so that the 32
/// lanes' fragment loads (8 values of d × 4 consecutive pixels) fall in 32
/// different banks.
constexpr int kTableStride = kChunkPixels + 4;
static_assert(kTableStride % 32 == 4, "fragment loads would conflict");
static_assert(kTileRows % kChunkRows == 0, "chunks must cover the tile");
static_assert(kTileCols == 32, "the tile is four 8-pixel groups wide");

/// The radius classes: kRadiusClassStep, 2·kRadiusClassStep, … kMaxTileRadiusPx.
constexpr int kRadiusClassStep = 4;
static_assert(kMaxTileRadiusPx % kRadiusClassStep == 0, "the last class ends at the largest tile radius");
/// The class of a tile radius (1 … kMaxTileRadiusPx): rounded up to a multiple of the step.
constexpr int radius_class(int radius) { return (radius + kRadiusClassStep - 1) / kRadiusClassStep * kRadiusClassStep; }

/// Sizes for the radius class kRadius (a multiple of 4): tiles of radius
/// R ≤ kRadius, RB = ⌈kRadius / 8⌉. The output region [x0 − kRadius,
/// x0 + 31 + kRadius] × [y0 − 8RB, y0 + 15 + 8RB] is cut into 16-row ×
/// 8-column blocks (the mma's M × N); warp w owns 16-row block w, all of its
/// column blocks. Every source row of the tile reaches every 16-row block
/// (16 + 16RB rows ≥ 2R + 16), so the warps are equally busy. Classes of
/// 4 px: at kRadius = 8k + 4 the column blocks start half a block off the
/// tile's groups, and 8 source pixels reach 2k + 2 of them where the next
/// class of 8 px would compute 2k + 3 (R ≤ 4: 2 instead of 3, R ≤ 12: 4
/// instead of 5).
template <int kRadius>
struct MmaGeometry {
  static_assert(kRadius % 4 == 0 && kRadius >= 4, "classes of 4 px");
  static constexpr int RB = (kRadius + 7) / 8;
  static constexpr int kRadiusMax = kRadius;
  /// Table entries d = 0 … kRadiusMax, then a zero sentinel that every larger
  /// |d| is clamped to.
  static constexpr int kTableEntries = kRadiusMax + 2;
  static constexpr int kColumnBlocks = 4 + kRadius / 4;
  static constexpr int kRowBlocks = 1 + RB;
  static constexpr int kWarps = kRowBlocks;
  static constexpr int kThreads = 32 * kWarps;
  /// Column blocks that 8 source pixels x0 + 8G … + 7 reach at R = kRadius:
  /// blocks G … G + kRadius / 4 (block J starts at x0 − kRadius + 8J).
  static constexpr int kBand = 1 + kRadius / 4;
  static constexpr int kRegionCols = 8 * kColumnBlocks, kRegionRows = 16 * kRowBlocks;
  static constexpr int kSharedBytes = 2 * kTableEntries * kTableStride * static_cast<int>(sizeof(float));
  /// Source rows per step: they run straight-line into one set of fresh
  /// accumulators (the longest mma chain: 3 products × 4 groups × this).
  /// Measured per class (docs/ks-core.md): 4 rows beat 2 by 2–4 % at RB 2
  /// and 3, and lose 30–60 % at RB 1 and 4 (registers); 1 row was 25 %
  /// slower everywhere.
  static constexpr int kRowsPerSum = (RB == 2 || RB == 3) ? 4 : 2;
  static_assert(kChunkRows % kRowsPerSum == 0, "steps must cover the chunk");
  static_assert(kRegionCols * kRegionRows <= 2 * kTableEntries * kTableStride, "the flush reuses the tables");
};

// ---------------------------------------------------------------- device helpers

/// Weight tables of radius classes up to this radius are written by fully
/// unrolled loops (compile-time store offsets, no loop counter); larger
/// classes keep a loop in the block kernel: unrolled to 32 the kernels grew
/// slower at every larger class, r_max 32 4.9 → 8.1 ms (docs/benchmarks.md
/// run 22). The RB 2 one-warp kernel (R' = 12, 16) unrolls its own (run 58).
constexpr int kUnrolledTablesMaxRadius = 8;
/// Classes of RB = ⌈R'/8⌉ up to this one load each thread's next pixel one
/// pass ahead (below): 3–6 % faster at RB 1–3; at RB 4 (165 registers) 40 %
/// slower (run 23).
constexpr int kPrefetchMaxRadiusClass = 3;

/// Row of |d| in a weight table: d itself up to kRadiusMax, else the zero sentinel.
template <int kRadiusMax>
__device__ inline int table_row(int d) {
  return min(abs(d), kRadiusMax + 1);
}

/// A mixed warp (wide and narrow non-zero pixels) takes the series for its
/// wide lanes where one of them is wider than this (σ > 6 px). Up to it the
/// walk keeps a wide lone pixel beside a narrow one within 6.6·10⁻⁶ of its
/// peak (H100, docs/benchmarks.md run 67: 3.9·10⁻⁶ to 4 px, 5.8·10⁻⁶ to
/// 5 px); from 7 px it was up to 1.5·10⁻⁵ off. At 3σ such warps are in
/// classes from R' = 20 (r ≥ 19): the one-warp kernels' mixed warps walk.
constexpr float kMixedWarpSeriesScale = 0.11785113f;  // 1/(√2·6 px)
/// The radius of the widest Gaussian that is not wide (σ = 2.36 px, a = 0.3)
/// at the default cut-off of 3σ: the narrow lanes' walk in a mixed warp.
constexpr int kNarrowRadiusAt3Sigma = 8;
/// Classes from this radius unroll that walk; below it a mixed warp takes
/// the series only at cut-offs under 3σ, and rolled it adds no code to the
/// one-warp kernels (unrolled, the RB 2 kernel at R' = 12 spilled 28 bytes).
constexpr int kMixedWarpsUnrolledMinRadius = 20;

/// Calls sink(d, K(d, σ)) for d = 0 … kRadiusMax + 1: the weights of one
/// pixel for its weight-table column, 0 beyond min(r, kRadiusMax) (the
/// pixel's own cut-off), in the sentinel row, and everywhere for an
/// inactive (zero) pixel. Called by all 32 lanes of a warp together; which
/// formula a lane takes is decided per warp, so that lanes do not diverge:
/// - Every active lane wide (σ > 2.36 px): WideGaussianSeries, as
///   gaussian_weight (erfc differences near ½ cancel).
/// - Wide and narrow lanes, a wide one over 6 px (the benchmark's random σ
///   at r_max ≥ 24; the engine's smooth σ hardly ever): the series in the
///   wide lanes, then the walk in the narrow ones, to their largest radius
///   (8 px at 3σ), over the series' zeros. Both formulas, each over the d
///   its lanes need: r_max 24 and 32 4.5 and 2 % slower than the walk in every
///   lane (run 68). (The walk in every lane with the series' K(0) or all its
///   weights in the wide ones had r_max 32 50–65 % slower: run 67.)
/// - Otherwise one erfc per d (each K(d) a difference of two neighbouring
///   erfc values) with HalfErfcWalk for erfcf: within 4·10⁻⁷ of the exact
///   weights (tests/gpu/superposition_cpu_test.cpp), but not relative to a
///   wide Gaussian's small K(0) (its wide lanes, ≤ 6 px: above).
/// Every lane evaluates up to the same d, whatever its own r: lanes of one
/// warp with different σ do not diverge (a loop to each lane's r and a fill
/// loop from there cost the warp both maxima). a is 1/(√2σ) by rcp_approx
/// (≤ 1 ulp; the IEEE division took ten instructions and a slow-path branch
/// per pixel).
template <int kRadiusMax, bool kUnrolled = (kRadiusMax <= kUnrolledTablesMaxRadius), class Sink>
__device__ inline void for_each_weight(float sigma_px, float cutoff_sigmas, bool active, int tile_radius, Sink&& sink) {
  const int r = active ? min(gaussian_radius_px(sigma_px, cutoff_sigmas), kRadiusMax) : -1;
  const float a = sigma_px >= kLocalDepositSigmaPx ? rcp_approx(sigma_px) * kInvSqrt2 : 0.0f;
  const bool wide = a > 0.0f && a < WideGaussianSeries::kMaxScale;
  const bool series_everywhere = __all_sync(0xffffffffu, !active || wide);
  if (series_everywhere || __any_sync(0xffffffffu, active && a > 0.0f && a < kMixedWarpSeriesScale)) {
    // The series, unrolled as the walk below (rolled, the depth stack's wide
    // slices ran 12 % slower: run 67); 0 in the narrow lanes, which the
    // walk after it overwrites up to their radii.
    const WideGaussianSeries series(a);
    const int r_series = wide ? r : -1;
    if constexpr (kUnrolled) {
#pragma unroll
      for (int d = 0; d <= kRadiusMax; ++d) sink(d, d <= r_series ? series.weight(d) : 0.0f);
      sink(kRadiusMax + 1, 0.0f);
    } else {
      const int last = min(tile_radius, kRadiusMax);
      // Every lane's weight, times 0 beyond its radius: with a branch around
      // it per d, r_max 24 and 32 ran 2.5–4 % slower (run 68). The weight is
      // finite for every σ the analysis lets through (a ≤ 707 at σ ≥ 10⁻³
      // px: the bracket stays below 10²⁷ to d = 33), so the product is 0.
#pragma unroll 4
      for (int d = 0; d <= last; ++d) sink(d, series.weight(d) * static_cast<float>(d <= r_series));
#pragma unroll 1
      for (int d = last + 1; d <= kRadiusMax + 1; ++d) sink(d, 0.0f);
    }
    if (series_everywhere) return;
    // The narrow lanes' walk, written by those lanes only: unrolled to 8
    // (rolled, r_max 16–32 ran 11–16 % slower than the walk alone, unrolled
    // 5–7 %, with the threshold at 4 px: run 68), then on to the largest
    // radius among them where a wider cut-off takes them further (a warp
    // vote: the same d in every lane).
    constexpr int kNarrowUnrolled = kRadiusMax >= kMixedWarpsUnrolledMinRadius ? kNarrowRadiusAt3Sigma : 0;
    HalfErfcWalk half_erfc(a);
    float upper = half_erfc.value();
    if (!wide) sink(0, r >= 0 ? 1.0f - 2.0f * upper : 0.0f);
    const auto walk_to = [&](int d) {  // the narrow lanes' K(d), from K(d − 1)'s walk
      half_erfc.advance();
      const float next = half_erfc.value();
      if (!wide) sink(d, d <= r ? upper - next : 0.0f);
      upper = next;
    };
#pragma unroll
    for (int d = 1; d <= kNarrowUnrolled; ++d) walk_to(d);
    const int narrow_last =
        static_cast<int>(__reduce_max_sync(0xffffffffu, wide ? 0u : static_cast<unsigned>(r + 1))) - 1;
#pragma unroll 1
    for (int d = kNarrowUnrolled + 1; d <= narrow_last; ++d) walk_to(d);
    return;
  }
  HalfErfcWalk half_erfc(a);
  float upper = half_erfc.value();  // ½·erfc((d + ½)·a) for d = 0
  sink(0, r >= 0 ? 1.0f - 2.0f * upper : 0.0f);
  if constexpr (kUnrolled) {
    // To the class's largest radius whatever the tile's (at most 3 d more
    // than it needs): compile-time store offsets, no loop counter and no
    // branch per d.
#pragma unroll
    for (int d = 1; d <= kRadiusMax; ++d) {
      half_erfc.advance();
      const float next = half_erfc.value();
      sink(d, d <= r ? upper - next : 0.0f);
      upper = next;
    }
    sink(kRadiusMax + 1, 0.0f);
  } else {
    const int last = min(tile_radius, kRadiusMax);
#pragma unroll 4
    for (int d = 1; d <= last; ++d) {
      half_erfc.advance();
      const float next = half_erfc.value();
      sink(d, d <= r ? upper - next : 0.0f);
      upper = next;
    }
#pragma unroll 1
    for (int d = last + 1; d <= kRadiusMax + 1; ++d) sink(d, 0.0f);
  }
}

/// Writes the weight-table columns of one pixel (value v, widths σx, σy) at
/// column q of tables [d][column] with row stride kStride: kyv[d] = v·K(d, σy),
/// kx[d] = K(d, σx), d = 0 … kRadiusMax + 1. Called by all 32 lanes of a warp
/// together (the choices are warp votes): no erfc for 32 zero pixels; one
/// erfc loop for both tables where every σx == σy (the paper's experiment; a
/// beam whose optics are round), the same tables as two loops give.
/// kUnrolled: the erfc loops unrolled to kRadiusMax (for_each_weight).
template <int kRadiusMax, int kStride, bool kUnrolled = (kRadiusMax <= kUnrolledTablesMaxRadius)>
__device__ inline void write_pixel_tables(float* kyv, float* kx, int q, float v, float sx, float sy,
                                          float cutoff_sigmas, int tile_radius) {
  const auto kyv_column = [&](int d, float k) { kyv[d * kStride + q] = v * k; };
  const auto kx_column = [&](int d, float k) { kx[d * kStride + q] = k; };
  if (!__any_sync(0xffffffffu, v != 0.0f)) {
    for (int d = 0; d <= kRadiusMax + 1; ++d) kyv[d * kStride + q] = kx[d * kStride + q] = 0.0f;
  } else if (__all_sync(0xffffffffu, sx == sy)) {
    for_each_weight<kRadiusMax, kUnrolled>(sx, cutoff_sigmas, v != 0.0f, tile_radius, [&](int d, float k) {
      kyv_column(d, k);
      kx_column(d, k);
    });
  } else {
    for_each_weight<kRadiusMax, kUnrolled>(sy, cutoff_sigmas, v != 0.0f, tile_radius, kyv_column);
    for_each_weight<kRadiusMax, kUnrolled>(sx, cutoff_sigmas, v != 0.0f, tile_radius, kx_column);
  }
}

/// Adds four consecutive cells of a tile's output region to columns X … X + 3
/// of an output row (`cols` wide; X may be off the row): one
/// red.global.add.v4.f32 (sm_90) where the four are inside the row and
/// 16-byte aligned — half the cost of the flush's scalar atomics
/// (docs/ks-core.md) — else one atomic per non-zero cell inside the row.
__device__ inline void add_quad(float* row, int X, int cols, float4 v) {
#if __CUDA_ARCH__ >= 900
  if (X >= 0 && X + 3 < cols && (reinterpret_cast<std::uintptr_t>(row + X) & 15u) == 0) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(row + X), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w)
                 : "memory");
    return;
  }
#endif
  const float cell[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (cell[i] != 0.0f && X + i >= 0 && X + i < cols) atomicAdd(row + X + i, cell[i]);
}

/// The bucket tile of this block (tile_list[blockIdx.x], or blockIdx.x
/// itself without a list): its slice and the origin of its
/// kTileCols × kTileRows pixels.
struct BucketTile {
  int slice, x0, y0;
  __device__ BucketTile(const StackParams& p, const int* tile_list) {
    const int tile = tile_list ? tile_list[blockIdx.x] : static_cast<int>(blockIdx.x);
    x0 = tile % p.tiles_x * kTileCols;
    y0 = (tile / p.tiles_x) % p.tiles_y * kTileRows;
    slice = tile / (p.tiles_x * p.tiles_y);
  }
};

/// B's table offsets per band block i = J − G (column block J, pixel group
/// G), whose columns start δ = 8i − kRadiusClass from the group's first
/// pixel: B[t][g] = K(δ + g − t) of pixel t, B[t+4][g] = K(δ + g − t − 4) of
/// pixel t + 4 (tables of row stride kStride).
template <int kRadiusClass, int kStride>
__device__ inline void b_table_offsets(int g, int t, int (&b_offset)[MmaGeometry<kRadiusClass>::kBand][2]) {
  using G = MmaGeometry<kRadiusClass>;
#pragma unroll
  for (int i = 0; i < G::kBand; ++i) {
    const int delta = 8 * i - kRadiusClass;
    b_offset[i][0] = table_row<G::kRadiusMax>(delta + g - t) * kStride + t;
    b_offset[i][1] = table_row<G::kRadiusMax>(delta + g - t - 4) * kStride + t + 4;
  }
}

/// Table offsets of the A fragments of the one-warp kernels: source rows
/// `row` … `row` + kRows − 1 of the tables (rows of kTileCols pixels, row
/// stride kStride), tile rows `tile_row` … onwards, for each of the region's
/// 16-row blocks b (rows y0 − 8RB + 16b + m): A[m][k] = I·K(e + m) with
/// e = 16b − 8RB − tile row. rowbase[k]: the table column of the row's first pixel.
template <int kRadiusClass, int kRows, int kStride>
__device__ inline void a_table_offsets(int row, int tile_row, int g, int t,
                                       int (&a_offset)[kRows][MmaGeometry<kRadiusClass>::kRowBlocks][2],
                                       int (&rowbase)[kRows]) {
  using G = MmaGeometry<kRadiusClass>;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    rowbase[k] = (row + k) * kTileCols;
#pragma unroll
    for (int b = 0; b < G::kRowBlocks; ++b) {
      const int e = 16 * b - 8 * G::RB - (tile_row + k);
      a_offset[k][b][0] = table_row<G::kRadiusMax>(e + g) * kStride + t + rowbase[k];
      a_offset[k][b][1] = table_row<G::kRadiusMax>(e + g + 8) * kStride + t + rowbase[k];
    }
  }
}

/// The products of kRows source rows for a warp that owns the region's 16-row
/// blocks kFirstBlock … kLastBlock (the one-warp kernels): per row and 8-pixel
/// group, each B fragment (the horizontal weights) is loaded and split once
/// and multiplied into every block's sums; straight-line code (no branch per
/// row, group or block).
template <int kRadiusClass, int kFirstBlock, int kLastBlock, int kRows>
__device__ inline void multiply_rows_one_warp(
    const float* kyv, const float* kx, const int (&a_offset)[kRows][MmaGeometry<kRadiusClass>::kRowBlocks][2],
    const int (&rowbase)[kRows], const int (&b_offset)[MmaGeometry<kRadiusClass>::kBand][2],
    float (&part)[MmaGeometry<kRadiusClass>::kRowBlocks][MmaGeometry<kRadiusClass>::kColumnBlocks][4]) {
  using G = MmaGeometry<kRadiusClass>;
  static_assert(0 <= kFirstBlock && kFirstBlock <= kLastBlock && kLastBlock < G::kRowBlocks, "blocks of the region");
#pragma unroll
  for (int group = 0; group < kTileCols / 8; ++group)
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      uint32_t b_hi[G::kBand][2], b_lo[G::kBand][2];
#pragma unroll
      for (int i = 0; i < G::kBand; ++i) {
        split_tf32(kx[b_offset[i][0] + rowbase[k] + 8 * group], b_hi[i][0], b_lo[i][0]);
        split_tf32(kx[b_offset[i][1] + rowbase[k] + 8 * group], b_hi[i][1], b_lo[i][1]);
      }
#pragma unroll
      for (int b = kFirstBlock; b <= kLastBlock; ++b) {
        uint32_t a_hi[4], a_lo[4];
        split_tf32(kyv[a_offset[k][b][0] + 8 * group], a_hi[0], a_lo[0]);
        split_tf32(kyv[a_offset[k][b][1] + 8 * group], a_hi[1], a_lo[1]);
        split_tf32(kyv[a_offset[k][b][0] + 8 * group + 4], a_hi[2], a_lo[2]);
        split_tf32(kyv[a_offset[k][b][1] + 8 * group + 4], a_hi[3], a_lo[3]);
#pragma unroll
        for (int i = 0; i < G::kBand; ++i)
          mma_3xtf32(part[b][group + i], a_hi, a_lo, b_hi[i][0], b_hi[i][1], b_lo[i][0], b_lo[i][1]);  // J = G + i
      }
    }
}

/// multiply_rows_one_warp for tile rows `first_row` … + kRows − 1 (tile
/// radius `radius`), over only the region's 16-row blocks they reach: block
/// b (region rows 16b … 16b + 15, row 0 at y0 − 8RB) is reached by tile row
/// j where j + 8RB − radius ≤ 16b + 15 and j + 8RB + radius ≥ 16b. The
/// choice is warp-uniform and compile-time inside (no branch in the
/// products). RB 1 only: at radius 4, the first and last four rows of a
/// tile reach one block only (a quarter of the products). (At RB 2 the
/// three copies of the products cost more in instruction fetch than the
/// skipped products saved: scatter_tensor_core_warp_rb2_kernel.)
template <int kRadiusClass, int kRows>
__device__ inline void multiply_reached_rows(
    int first_row, int radius, const float* kyv, const float* kx,
    const int (&a_offset)[kRows][MmaGeometry<kRadiusClass>::kRowBlocks][2], const int (&rowbase)[kRows],
    const int (&b_offset)[MmaGeometry<kRadiusClass>::kBand][2],
    float (&part)[MmaGeometry<kRadiusClass>::kRowBlocks][MmaGeometry<kRadiusClass>::kColumnBlocks][4]) {
  using G = MmaGeometry<kRadiusClass>;
  const int last_row = first_row + kRows - 1;
  // The first block reached is 1 where the first row's reach ends below
  // block 0; the last is NB − 2 where the last row's ends above the last block.
  const bool skips_first = first_row + 8 * G::RB - radius > 15;
  const bool skips_last = last_row + 8 * G::RB + radius < 16 * (G::kRowBlocks - 1);
  static_assert(G::RB == 1, "the region's blocks 0 and 1: (0, 1), (0, 0) or (1, 1)");
  if (skips_last)
    multiply_rows_one_warp<kRadiusClass, 0, 0>(kyv, kx, a_offset, rowbase, b_offset, part);
  else if (skips_first)
    multiply_rows_one_warp<kRadiusClass, 1, 1>(kyv, kx, a_offset, rowbase, b_offset, part);
  else
    multiply_rows_one_warp<kRadiusClass, 0, 1>(kyv, kx, a_offset, rowbase, b_offset, part);
}

/// Adds a tile's output region (shared memory, [kRegionRows][kRegionCols],
/// origin (x0 − kRadiusClass, y0 − 8RB)) to the output, row by row
/// (consecutive threads, consecutive cells): in float four cells per vector
/// atomic, in fixed point one atomic per non-zero cell inside the slice, as
/// the tile scatter does. Thread `thread` of `threads`.
template <int kRadiusClass, int kRegionStride = MmaGeometry<kRadiusClass>::kRegionCols>
__device__ inline void flush_region(const StackParams& p, const float* region, int x0, int y0, int s, int thread,
                                    int threads) {
  using G = MmaGeometry<kRadiusClass>;
  static_assert(kRegionStride >= G::kRegionCols && kRegionStride % 4 == 0, "rows of whole, aligned quads");
  const auto region_offset = [](int cell) {  // cell c of the region, row by row
    if constexpr (kRegionStride == G::kRegionCols) return cell;
    else return cell / G::kRegionCols * kRegionStride + cell % G::kRegionCols;
  };
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  static_assert(G::kRegionCols % 4 == 0 && kRadiusClass % 4 == 0, "quads of the region start at X ≡ x0 (mod 4)");
  if (!p.out_fixed) {
    constexpr int kQuads = G::kRegionCols / 4;
    for (int c = thread; c < G::kRegionRows * kQuads; c += threads) {
      const float4 v = *reinterpret_cast<const float4*>(region + region_offset(4 * c));
      if (v.x == 0.0f && v.y == 0.0f && v.z == 0.0f && v.w == 0.0f) continue;
      const int Y = y0 - 8 * G::RB + c / kQuads, X = x0 - kRadiusClass + 4 * (c % kQuads);
      if (Y < 0 || Y >= p.rows) continue;  // clipped output grid
      add_quad(p.out + s * plane + static_cast<std::size_t>(Y) * p.cols, X, p.cols, v);
    }
    return;
  }
  for (int c = thread; c < G::kRegionRows * G::kRegionCols; c += threads) {
    const float v = region[region_offset(c)];
    if (v == 0.0f) continue;
    const int Y = y0 - 8 * G::RB + c / G::kRegionCols, X = x0 - kRadiusClass + c % G::kRegionCols;
    if (X < 0 || X >= p.cols || Y < 0 || Y >= p.rows) continue;  // clipped output grid
    accumulate(p, s * plane + static_cast<std::size_t>(Y) * p.cols + X, v);
  }
}

// ---------------------------------------------------------------- kernel

/// One block per bucket tile (32 × 16 source pixels) of radius `radius` ≤ kRadiusClass.
///
/// As products (M = 16 output rows Y = Yb + m, N = 8 output columns
/// X = Xb + n, K = 8 source pixels x_k of one row y):
///   A[m][k] = I(x_k, y) · K(Yb + m − y, σy),   B[k][n] = K(Xb + n − x_k, σx).
/// Per chunk of 8 source rows the block writes, for each pixel, its value ×
/// vertical weights and its horizontal weights into shared tables [d][pixel];
/// then warp w, row by row and 8 pixels at a time, multiplies one A fragment
/// (its 16-row block) by the B fragments of the kBand column blocks the
/// group reaches. A's table row depends on the lane's g and the source row
/// only, B's on g − t and the block offset only: every fragment element is one
/// shared load at a per-lane address plus a compile-time offset, and the
/// band's blocks are compile-time — no index arithmetic or branches per
/// product. kFreshRowSums: each step of kRowsPerSum source rows sums into
/// fresh accumulators that are then added in float (guards against the
/// tensor cores' accumulation rounding over long chains; measured in
/// docs/ks-core.md); otherwise one chain over the tile (benchmark only).
template <int kRadiusClass, bool kFreshRowSums>
__global__ void __launch_bounds__(MmaGeometry<kRadiusClass>::kThreads)
    scatter_tensor_core_kernel(StackParams p, const int* tile_list, int radius) {
  using G = MmaGeometry<kRadiusClass>;
  constexpr int RB = G::RB;
  constexpr int kColumnBlocks = G::kColumnBlocks;
  extern __shared__ float tables[];
  __shared__ unsigned int row_mask[kChunkRows];           // bit i: pixel x0 + i of the row is non-zero
  float* kyv = tables;                                     // [d][pixel]: I · K(d, σy)
  float* kx = tables + G::kTableEntries * kTableStride;    // [d][pixel]: K(d, σx)

  const BucketTile tile(p, tile_list);
  const int s = tile.slice, x0 = tile.x0, y0 = tile.y0;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int block_row0 = y0 - 8 * RB + 16 * warp;  // Yb of this warp's 16-row block

  int b_offset[G::kBand][2];  // B's table offsets per band block
  b_table_offsets<kRadiusClass, kTableStride>(g, t, b_offset);

  float sum[kColumnBlocks][4];
#pragma unroll
  for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) sum[j][q] = 0.0f;

  // Pixel q of a chunk (value, σx, σy; zeros outside the slice). With
  // kPrefetch each thread loads its next pixel one pass ahead — the first of
  // the next chunk before this chunk's products — so that the global loads'
  // latency hides behind work (ncu: waiting for them was a quarter of the
  // table phase at RB 1, docs/benchmarks.md run 21).
  constexpr bool kPrefetch = RB <= kPrefetchMaxRadiusClass;
  float next_v, next_sx, next_sy;
  const SliceBox box = read_box(p, s);
  const auto load_pixel = [&](int chunk, int q) {
    const int x = x0 + q % kTileCols, y = y0 + chunk + q / kTileCols;
    next_v = next_sx = next_sy = 0.0f;
    if (in_range(x, box.col_begin, box.col_end) && in_range(y, box.row_begin, box.row_end)) {
      const std::size_t i = s * plane + static_cast<std::size_t>(y) * p.cols + x;
      next_v = p.image[i];
      next_sx = p.sigma_x[i];
      next_sy = p.sigma_y[i];
    }
  };
  if constexpr (kPrefetch) load_pixel(0, threadIdx.x);

#pragma unroll 1
  for (int chunk = 0; chunk < kTileRows; chunk += kChunkRows) {
    // Weight tables of the chunk's pixels: one pixel per thread per pass, a
    // warp builds whole rows. Every pass but the last covers all threads,
    // and the last whole warps (256 − k × kThreads is a multiple of 32): the
    // warp votes below see full warps.
    static_assert((kChunkPixels - (kChunkPixels / G::kThreads) * G::kThreads) % 32 == 0, "passes must be whole warps");
#pragma unroll 1
    for (int q = threadIdx.x; q < kChunkPixels; q += G::kThreads) {
      if constexpr (!kPrefetch) load_pixel(chunk, q);
      const float v = next_v, sx = next_sx, sy = next_sy;
      if constexpr (kPrefetch) {
        if (q + G::kThreads < kChunkPixels)
          load_pixel(chunk, q + G::kThreads);
        else if (chunk + kChunkRows < kTileRows)
          load_pixel(chunk + kChunkRows, threadIdx.x);
      }
      write_pixel_tables<G::kRadiusMax, kTableStride>(kyv, kx, q, v, sx, sy, p.cutoff_sigmas, radius);
      // (Voted again here, after write_pixel_tables' vote: one ballot for
      // both, held in a register through the table build, spilled at RB 1.)
      const unsigned int nonzero = __ballot_sync(0xffffffffu, v != 0.0f);
      if (lane == 0) row_mask[q / kTileCols] = nonzero;
    }
    __syncthreads();

#pragma unroll 1
    for (int row = 0; row < kChunkRows; row += G::kRowsPerSum) {
      // One step: kRowsPerSum source rows, straight-line code (no branch per
      // row or per 8-pixel group, so that the compiler can interleave their
      // loads, splits and mma; skipping all-zero groups cost more than it
      // saved, docs/ks-core.md). A row of the step that is zero or out of
      // reach multiplies zeros (its values, or its A rows the zero
      // sentinel); a step with no row in reach is skipped (warp-uniform; no
      // barrier inside this loop).
      bool in_reach = false;
      int a_offset0[G::kRowsPerSum], a_offset1[G::kRowsPerSum], rowbase[G::kRowsPerSum];
#pragma unroll
      for (int k = 0; k < G::kRowsPerSum; ++k) {
        const int e = block_row0 - (y0 + chunk + row + k);  // A[m][k] = I·K(e + m)
        in_reach |= row_mask[row + k] != 0u && e <= radius && e + 15 >= -radius;
        rowbase[k] = (row + k) * kTileCols;
        a_offset0[k] = table_row<G::kRadiusMax>(e + g) * kTableStride + t + rowbase[k];
        a_offset1[k] = table_row<G::kRadiusMax>(e + g + 8) * kTableStride + t + rowbase[k];
      }
      if (!in_reach) continue;
      const auto multiply_rows = [&](float(&acc)[kColumnBlocks][4]) {
#pragma unroll
        for (int group = 0; group < kTileCols / 8; ++group)
#pragma unroll
          for (int k = 0; k < G::kRowsPerSum; ++k) {
            uint32_t a_hi[4], a_lo[4];
            split_tf32(kyv[a_offset0[k] + 8 * group], a_hi[0], a_lo[0]);
            split_tf32(kyv[a_offset1[k] + 8 * group], a_hi[1], a_lo[1]);
            split_tf32(kyv[a_offset0[k] + 8 * group + 4], a_hi[2], a_lo[2]);
            split_tf32(kyv[a_offset1[k] + 8 * group + 4], a_hi[3], a_lo[3]);
#pragma unroll
            for (int i = 0; i < G::kBand; ++i) {
              uint32_t b0_hi, b0_lo, b1_hi, b1_lo;
              split_tf32(kx[b_offset[i][0] + rowbase[k] + 8 * group], b0_hi, b0_lo);
              split_tf32(kx[b_offset[i][1] + rowbase[k] + 8 * group], b1_hi, b1_lo);
              mma_3xtf32(acc[group + i], a_hi, a_lo, b0_hi, b1_hi, b0_lo, b1_lo);  // column block J = G + i
            }
          }
      };
      if constexpr (kFreshRowSums) {
        float part[kColumnBlocks][4];
#pragma unroll
        for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) part[j][q] = 0.0f;
        multiply_rows(part);
#pragma unroll
        for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) sum[j][q] += part[j][q];
      } else {
        multiply_rows(sum);
      }
    }
    __syncthreads();  // every warp is done with the tables before they are rewritten
  }

  // Flush through shared memory (the tables are free now): each warp stores
  // its 16 rows of the region, then the block adds the region to the output
  // row by row (consecutive lanes, consecutive cells): in float four cells
  // per vector atomic, in fixed point one atomic per non-zero cell inside
  // the slice, as the tile scatter does.
  float* region = tables;  // [kRegionRows][kRegionCols], origin (x0 − kRadiusClass, y0 − 8RB)
#pragma unroll
  for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q)
      region[(16 * warp + g + 8 * (q >> 1)) * G::kRegionCols + 8 * j + 2 * t + (q & 1)] = sum[j][q];
  __syncthreads();
  flush_region<kRadiusClass>(p, region, x0, y0, s, threadIdx.x, G::kThreads);
}


/// The one-warp kernels' pixels: a lane's are column x0 + lane of the tile's
/// rows y0 … y0 + 15, one per pass, each loaded a pass ahead (zeros outside
/// the slice's read_box): v, sx, sy hold the next one. The address steps by a row, where
/// a pixel index computed per pass took ~30 instructions of 64-bit arithmetic.
struct TileColumnPixels {
  const float *image, *sigma_x, *sigma_y;
  int y0, row_begin, row_end, cols;
  bool column_inside;
  float v = 0.0f, sx = 0.0f, sy = 0.0f;
  __device__ TileColumnPixels(const StackParams& p, int s, int x0, int y0, int lane) : y0(y0), cols(p.cols) {
    const SliceBox box = read_box(p, s);
    row_begin = box.row_begin;
    row_end = box.row_end;
    column_inside = in_range(x0 + lane, box.col_begin, box.col_end);
    const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
    const std::size_t first = s * plane + static_cast<std::size_t>(y0) * p.cols + x0 + lane;
    image = p.image + first;
    sigma_x = p.sigma_x + first;
    sigma_y = p.sigma_y + first;
    load(0);
  }
  /// Loads tile row `tile_row` (the next in turn), then steps to the next row.
  __device__ void load(int tile_row) {
    const bool inside = column_inside && in_range(y0 + tile_row, row_begin, row_end);
    v = inside ? *image : 0.0f;
    sx = inside ? *sigma_x : 0.0f;
    sy = inside ? *sigma_y : 0.0f;
    image += cols;
    sigma_x += cols;
    sigma_y += cols;
  }
};

/// Weight tables of the one-warp kernel (below): 4 source rows at a time.
constexpr int kWarpChunkRows = 4;
constexpr int kWarpChunkPixels = kWarpChunkRows * kTileCols;
/// ≡ 4 (mod 32), as kTableStride: the fragment loads stay conflict-free.
constexpr int kWarpTableStride = kWarpChunkPixels + 4;
static_assert(kWarpTableStride % 32 == 4, "fragment loads would conflict");
static_assert(kTileRows % kWarpChunkRows == 0, "chunks must cover the tile");

/// The one-warp kernel's shared memory: its two tables of kWarpChunkRows rows.
template <int kRadiusClass>
struct WarpTileGeometry {
  using G = MmaGeometry<kRadiusClass>;
  static_assert(G::RB == 1, "one warp per tile: the classes whose region is two 16-row blocks");
  static constexpr int kSharedBytes = 2 * G::kTableEntries * kWarpTableStride * static_cast<int>(sizeof(float));
  static_assert(G::kRegionCols * G::kRegionRows <= 2 * G::kTableEntries * kWarpTableStride,
                "the flush reuses the tables");
  /// Source rows per fresh sum, as the block kernel's at RB 1.
  static constexpr int kRowsPerSum = 2;
  static_assert(kWarpChunkRows % kRowsPerSum == 0, "steps must cover the chunk");
};

/// One warp per bucket tile of radius `radius` ≤ kRadiusClass, for the classes
/// of RB = 1 (R ≤ 8): the same products as scatter_tensor_core_kernel, but
/// one warp computes both 16-row blocks of the region. In the block kernel
/// each of two warps loaded and split the same B fragments (the horizontal
/// weights, 6 of a group's 10 fragment elements per lane); here they are
/// loaded once and multiplied into both blocks' sums, and the warp builds its
/// own tables, so that nothing in the tile waits on a block barrier (the
/// table build of one warp and the products of another overlap freely).
/// The tables hold kWarpChunkRows source rows, half the block kernel's
/// chunk: the same shared memory per warp.
// 16 warps per SM (≤ 128 registers; 12 bytes spilled at R' = 8): at 12
// (160 registers, no spill) the kernel was 3 % slower at r 8 and 6 % at
// r 4 (ncu, H100, docs/benchmarks.md run 50).
template <int kRadiusClass>
__global__ void __launch_bounds__(32, 16) scatter_tensor_core_warp_kernel(StackParams p, const int* tile_list, int radius) {
  using G = MmaGeometry<kRadiusClass>;
  constexpr int kColumnBlocks = G::kColumnBlocks;
  constexpr int kStride = kWarpTableStride;
  constexpr int kRowsPerSum = WarpTileGeometry<kRadiusClass>::kRowsPerSum;
  extern __shared__ float tables[];
  float* kyv = tables;                                // [d][pixel]: I · K(d, σy)
  float* kx = tables + G::kTableEntries * kStride;    // [d][pixel]: K(d, σx)

  const BucketTile tile(p, tile_list);
  const int s = tile.slice, x0 = tile.x0, y0 = tile.y0;

  const int lane = threadIdx.x;
  const int g = lane / 4, t = lane % 4;

  int b_offset[G::kBand][2];  // B's table offsets per band block
  b_table_offsets<kRadiusClass, kStride>(g, t, b_offset);

  float sum[2][kColumnBlocks][4];  // [16-row block][column block][fragment]
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) sum[b][j][q] = 0.0f;

  TileColumnPixels pixels(p, s, x0, y0, lane);

#pragma unroll 1
  for (int chunk = 0; chunk < kTileRows; chunk += kWarpChunkRows) {
    unsigned nonzero_rows = 0;  // bit j: row j of the chunk has a non-zero pixel (warp-uniform)
#pragma unroll 1
    for (int j = 0; j < kWarpChunkRows; ++j) {
      const float v = pixels.v, sx = pixels.sx, sy = pixels.sy;
      if (chunk + j + 1 < kTileRows) pixels.load(chunk + j + 1);
      write_pixel_tables<G::kRadiusMax, kStride>(kyv, kx, j * kTileCols + lane, v, sx, sy, p.cutoff_sigmas, radius);
      if (__any_sync(0xffffffffu, v != 0.0f)) nonzero_rows |= 1u << j;
    }
    __syncwarp();

    // Steps of kRowsPerSum source rows, straight-line, each into fresh
    // accumulators added to the tile's sums (the block kernel's numerics at
    // RB 1). Every source row of the tile reaches both 16-row blocks; a step
    // of zero rows is skipped (warp-uniform).
#pragma unroll 1
    for (int row = 0; row < kWarpChunkRows; row += kRowsPerSum) {
      if ((nonzero_rows >> row & ((1u << kRowsPerSum) - 1u)) == 0u) continue;
      int a_offset[kRowsPerSum][2][2], rowbase[kRowsPerSum];
      a_table_offsets<kRadiusClass, kRowsPerSum, kStride>(row, chunk + row, g, t, a_offset, rowbase);
      float part[2][kColumnBlocks][4];
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) part[b][j][q] = 0.0f;
      // Only the row blocks the step's rows reach, at R' = 4 (a radius-4
      // tile's first and last four rows reach one block: r_max 4 0.56 →
      // 0.53 ms, docs/benchmarks.md run 55); at R' = 8 the three variants
      // spilled 120 bytes, and the tiles of radius 8 have no row out of reach.
      if constexpr (kRadiusClass == 4)
        multiply_reached_rows<kRadiusClass, kRowsPerSum>(chunk + row, radius, kyv, kx, a_offset, rowbase, b_offset, part);
      else
        multiply_rows_one_warp<kRadiusClass, 0, 1>(kyv, kx, a_offset, rowbase, b_offset, part);
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) sum[b][j][q] += part[b][j][q];
    }
    __syncwarp();  // the products are done with the tables before they are rewritten
  }

  // Flush through shared memory, as the block kernel's.
  float* region = tables;  // [kRegionRows][kRegionCols], origin (x0 − kRadiusClass, y0 − 8)
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        region[(16 * b + g + 8 * (q >> 1)) * G::kRegionCols + 8 * j + 2 * t + (q & 1)] = sum[b][j][q];
  __syncwarp();
  flush_region<kRadiusClass>(p, region, x0, y0, s, lane, 32);
}

/// The one-warp kernel of RB = 2 (R' = 12 and 16; the region three 16-row
/// blocks high, below): its tables of kChunkRows source rows, and the tile's
/// sums in shared memory beside them.
template <int kRadiusClass>
struct WarpSharedSumGeometry {
  using G = MmaGeometry<kRadiusClass>;
  static_assert(G::RB == 2, "three row blocks per warp: the classes of RB 2");
  /// Source rows per table build (and per step of products).
  static constexpr int kChunkRows = 2;
  /// ≡ 4 (mod 32), as kTableStride: the fragment loads stay conflict-free.
  static constexpr int kStride = kChunkRows * kTileCols + 4;
  static_assert(kStride % 32 == 4, "fragment loads would conflict");
  static_assert(kTileRows % kChunkRows == 0, "chunks must cover the tile");
  /// Source rows per fresh sum, as the block kernel's at RB 2.
  static constexpr int kRowsPerSum = 4;
  static_assert(kRowsPerSum % kChunkRows == 0 && kTileRows % kRowsPerSum == 0, "sums of whole chunks");
  /// Row stride of the sums: ≡ 8 or 24 (mod 32), so that a half-warp's
  /// float2 accesses to rows g … g + 3 of a fragment fall in 32 banks.
  static constexpr int kRegionStride = G::kRegionCols % 32 == 0 ? G::kRegionCols + 8 : G::kRegionCols;
  static_assert(kRegionStride % 32 == 8 || kRegionStride % 32 == 24, "the sums' float2 accesses would conflict");
  static constexpr int kRegionFloats = G::kRegionRows * kRegionStride;
  static constexpr int kTableFloats = G::kTableEntries * kStride;
  static constexpr int kSharedBytes = (kRegionFloats + 2 * kTableFloats) * static_cast<int>(sizeof(float));
  /// Warps per SM it is compiled for, measured per class (H100, fixed r,
  /// docs/benchmarks.md runs 53 and 60): at R' = 12, 12 warps (168
  /// registers, 56 bytes spilled) 1.02 ms against 1.08 at 8 (206 registers,
  /// no spill) and 1.07 for the block kernel; at R' = 16, 8 warps (208
  /// registers) 1.24 ms, where 12 (72 bytes spilled) took 1.42 and the block
  /// kernel 1.40.
  static constexpr int kWarpsPerSm = kRadiusClass == 12 ? 12 : 8;
};

/// One warp per bucket tile of radius `radius` ≤ kRadiusClass, for the classes
/// of RB = 2 (8 < R ≤ 16): as scatter_tensor_core_warp_kernel, one warp
/// computes all three 16-row blocks of the region, so each B fragment is
/// loaded and split once where the block kernel's three warps did it three
/// times. Three blocks' sums would take 84–96 registers and as many fresh
/// ones: here only the fresh sums stay in registers, and every kRowsPerSum
/// source rows they are added to the tile's sums in shared memory (float2
/// loads and stores, the block kernel's numerics). Source rows one at a
/// time, each into all three row blocks (the loops' comment below says why).
template <int kRadiusClass>
__global__ void __launch_bounds__(32, WarpSharedSumGeometry<kRadiusClass>::kWarpsPerSm)
    scatter_tensor_core_warp_rb2_kernel(StackParams p, const int* tile_list, int radius) {
  using G = MmaGeometry<kRadiusClass>;
  using W = WarpSharedSumGeometry<kRadiusClass>;
  constexpr int kColumnBlocks = G::kColumnBlocks, kRowBlocks = G::kRowBlocks;
  constexpr int kStride = W::kStride, kChunkRows = W::kChunkRows;
  extern __shared__ float4 shared4[];
  float* region = reinterpret_cast<float*>(shared4);  // [kRegionRows][kRegionStride], origin (x0 − kRadiusClass, y0 − 16)
  float* kyv = region + W::kRegionFloats;              // [d][pixel]: I · K(d, σy)
  float* kx = kyv + W::kTableFloats;                   // [d][pixel]: K(d, σx)

  const BucketTile tile(p, tile_list);
  const int s = tile.slice, x0 = tile.x0, y0 = tile.y0;

  const int lane = threadIdx.x;
  const int g = lane / 4, t = lane % 4;

  int b_offset[G::kBand][2];  // B's table offsets per band block
  b_table_offsets<kRadiusClass, kStride>(g, t, b_offset);

  float part[kRowBlocks][kColumnBlocks][4];  // fresh sums of kRowsPerSum source rows
  const auto clear_part = [&] {
#pragma unroll
    for (int b = 0; b < kRowBlocks; ++b)
#pragma unroll
      for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) part[b][j][q] = 0.0f;
  };
  clear_part();
  // The fresh sums into the tile's: the lane's own cells (fragment d0, d1 at
  // row g, columns 2t, 2t + 1; d2, d3 eight rows down), stored by the first
  // sum and added by the others.
  const auto add_part_to_region = [&](bool first) {
#pragma unroll
    for (int b = 0; b < kRowBlocks; ++b)
#pragma unroll
      for (int j = 0; j < kColumnBlocks; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float2* cell = reinterpret_cast<float2*>(region + (16 * b + g + 8 * h) * W::kRegionStride + 8 * j + 2 * t);
          float2 v = make_float2(part[b][j][2 * h], part[b][j][2 * h + 1]);
          if (!first) {
            const float2 old = *cell;
            v.x += old.x;
            v.y += old.y;
          }
          *cell = v;
        }
  };

  TileColumnPixels pixels(p, s, x0, y0, lane);

  // Instruction fetch decides the loops below. With the chunk's rows
  // unrolled in the table build and the products, and the products in three
  // copies (the row blocks each step reaches, as at RB 1), the kernel's code
  // was 76 KB at R' = 12 and 87 KB at 16, and its warps waited for
  // instructions (ncu at fixed r 12: 1.2 warps stalled on "no instruction"
  // per issue, a fifth of the stall samples). One row at a time in both, and
  // every row block multiplied (8 of 48 row-block products at radius 12 are
  // out of reach and come out zero): 36 KB and 39 KB, 0.09 stalled per
  // issue, 17 % more HMMA and still 1–3 % faster — fixed r 12 0.956 →
  // 0.933 ms, 16 1.236 → 1.214, the depth stack 0.634 → 0.617 (H100,
  // docs/benchmarks.md run 66).
#pragma unroll 1
  for (int chunk = 0; chunk < kTileRows; chunk += kChunkRows) {
    bool any_nonzero = false;  // warp-uniform
#pragma unroll 1
    for (int j = 0; j < kChunkRows; ++j) {
      const float v = pixels.v, sx = pixels.sx, sy = pixels.sy;
      if (chunk + j + 1 < kTileRows) pixels.load(chunk + j + 1);
      // Table loops unrolled to the class's radius (a larger class than
      // kUnrolledTablesMaxRadius, which holds for the block kernel): r_max 16
      // 1.40 → 1.36 ms, 12 1.15 → 1.14 (docs/benchmarks.md run 58).
      write_pixel_tables<G::kRadiusMax, kStride, true>(kyv, kx, j * kTileCols + lane, v, sx, sy, p.cutoff_sigmas,
                                                       radius);
      any_nonzero |= __any_sync(0xffffffffu, v != 0.0f);
    }
    __syncwarp();

    if (any_nonzero) {
#pragma unroll 1
      for (int k = 0; k < kChunkRows; ++k) {
        int a_offset[1][kRowBlocks][2], rowbase[1];
        a_table_offsets<kRadiusClass, 1, kStride>(k, chunk + k, g, t, a_offset, rowbase);
        multiply_rows_one_warp<kRadiusClass, 0, kRowBlocks - 1>(kyv, kx, a_offset, rowbase, b_offset, part);
      }
    }
    if ((chunk + kChunkRows) % W::kRowsPerSum == 0) {
      add_part_to_region(chunk + kChunkRows == W::kRowsPerSum);
      clear_part();
    }
    __syncwarp();  // the products are done with the tables before they are rewritten
  }
  flush_region<kRadiusClass, W::kRegionStride>(p, region, x0, y0, s, lane, 32);
}

/// With fresh row sums (the default accumulation), the one-warp kernels run
/// the classes of RB = 1 (sums in registers) and RB = 2 (sums in shared
/// memory); the block kernel the others, and the chained accumulation the
/// benchmark compares.
template <int kRadiusClass, bool kFresh>
constexpr bool kOneWarpPerTile = kFresh && MmaGeometry<kRadiusClass>::RB == 1;
template <int kRadiusClass, bool kFresh>
constexpr bool kOneWarpPerTileRb2 = kFresh && MmaGeometry<kRadiusClass>::RB == 2;

/// A kernel's dynamic shared memory limit, and the carveout at its maximum.
template <class Kernel>
void configure_kernel(Kernel kernel, int shared_bytes) {
  PD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
  PD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
}

/// The kernel launch_accumulation launches for this class and accumulation
/// (only that one is instantiated).
template <int kRadiusClass, bool kFresh>
void configure_radius_class() {
  if constexpr (kOneWarpPerTile<kRadiusClass, kFresh>) {
    configure_kernel(scatter_tensor_core_warp_kernel<kRadiusClass>, WarpTileGeometry<kRadiusClass>::kSharedBytes);
  } else if constexpr (kOneWarpPerTileRb2<kRadiusClass, kFresh>) {
    configure_kernel(scatter_tensor_core_warp_rb2_kernel<kRadiusClass>,
                     WarpSharedSumGeometry<kRadiusClass>::kSharedBytes);
  } else {
    configure_kernel(scatter_tensor_core_kernel<kRadiusClass, kFresh>, MmaGeometry<kRadiusClass>::kSharedBytes);
  }
}

/// Every class's kernel, from kRadiusClass on.
template <bool kFresh, int kRadiusClass = kRadiusClassStep>
void configure_accumulation() {
  configure_radius_class<kRadiusClass, kFresh>();
  if constexpr (kRadiusClass < kMaxTileRadiusPx) configure_accumulation<kFresh, kRadiusClass + kRadiusClassStep>();
}

/// The kernel of radius_class(radius), searched from kRadiusClass on.
template <bool kFresh, int kRadiusClass = kRadiusClassStep>
void launch_accumulation(int radius, int count, const int* tiles, const StackParams& p, cudaStream_t stream) {
  using G = MmaGeometry<kRadiusClass>;
  if (radius_class(radius) == kRadiusClass) {
    if constexpr (kOneWarpPerTile<kRadiusClass, kFresh>)
      scatter_tensor_core_warp_kernel<kRadiusClass>
          <<<count, 32, WarpTileGeometry<kRadiusClass>::kSharedBytes, stream>>>(p, tiles, radius);
    else if constexpr (kOneWarpPerTileRb2<kRadiusClass, kFresh>)
      scatter_tensor_core_warp_rb2_kernel<kRadiusClass>
          <<<count, 32, WarpSharedSumGeometry<kRadiusClass>::kSharedBytes, stream>>>(p, tiles, radius);
    else
      scatter_tensor_core_kernel<kRadiusClass, kFresh><<<count, G::kThreads, G::kSharedBytes, stream>>>(p, tiles, radius);
  } else if constexpr (kRadiusClass < kMaxTileRadiusPx)
    launch_accumulation<kFresh, kRadiusClass + kRadiusClassStep>(radius, count, tiles, p, stream);
}

}  // namespace

// ---------------------------------------------------------------- launchers

namespace {

/// Configures the kernels of one accumulation on the current device, once.
template <bool kFresh>
void prepare_accumulation() {
  static PerDeviceSetting prepared;
  prepared.once([] { configure_accumulation<kFresh>(); });
}

}  // namespace

void prepare_tensor_core_kernels() { prepare_accumulation<true>(); }

void launch_scatter_tensor_core_tiles(int radius, int count, const int* tiles, const StackParams& p,
                                      cudaStream_t stream, TensorCoreAccumulation accumulation) {
  if (radius < 1 || radius > kMaxTileRadiusPx)
    throw InternalError("tensor-core scatter: radius " + std::to_string(radius) + " px outside 1.." +
                        std::to_string(kMaxTileRadiusPx));
  if (accumulation == TensorCoreAccumulation::kFreshRowSums) {
    prepare_accumulation<true>();
    launch_accumulation<true>(radius, count, tiles, p, stream);
  } else {
    prepare_accumulation<false>();
    launch_accumulation<false>(radius, count, tiles, p, stream);
  }
  PD_CUDA_CHECK_LAUNCH("scatter_tensor_core_kernel");
}

}  // namespace protondose::cuda
