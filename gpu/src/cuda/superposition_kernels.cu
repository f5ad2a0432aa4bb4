// Kernels of the Gaussian kernel superposition (da Silva, Ansorge & Jena,
// shared/papers/scatter-kernel-superposition-on-gpu.md), in CUB order:
// launchers (bottom of the file) → kernels → device helpers (top).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "convolution_kernels.cuh"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/per_device_setting.cuh"
#include "protondose/core/error.h"
#include "protondose/core/host_timeline.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "superposition_device.cuh"
#include "superposition_kernels.cuh"

namespace protondose::cuda {
namespace {

// ---------------------------------------------------------------- device helpers

__device__ inline bool is_valid_value(float v) { return v >= 0.0f && v <= 3.0e38f; }  // false for NaN, Inf, < 0

// ---------------------------------------------------------------- analysis kernels

/// What a slice's summary (StackParams::slice_summary) settles, so that
/// analyse_tiles_kernel need not read the slice.
enum class SummarisedSlice {
  kRead,     ///< no summary, or one that leaves the slice to the analysis
  kEmpty,    ///< no pixel with image > 0, none invalid
  kUniform,  ///< one σx and one σy, valid, within kMaxKernelRadiusPx, and the slice runs separable
};

__device__ inline SummarisedSlice summarised_slice(const StackParams& p, int s) {
  if (!p.slice_summary) return SummarisedSlice::kRead;
  const std::size_t n = static_cast<std::size_t>(p.slices);
  const unsigned long long lo = p.slice_summary[kSummaryMinSigmaKey * n + s];
  const unsigned long long hi = p.slice_summary[kSummaryMaxSigmaKey * n + s];
  if (lo == ULLONG_MAX && hi == 0ull) return SummarisedSlice::kEmpty;
  if (!p.separable_uniform_slices || lo != hi) return SummarisedSlice::kRead;
  const float sx = __uint_as_float(static_cast<unsigned int>(hi >> 32));
  const float sy = __uint_as_float(static_cast<unsigned int>(hi & 0xffffffffull));
  const float largest = __uint_as_float(static_cast<unsigned int>(p.slice_summary[kSummaryMaxImage * n + s]));
  // What the analysis would reject stays with it, which names the pixel.
  if (!is_valid_value(sx) || !is_valid_value(sy) || !is_valid_value(largest) || !(largest > 0.0f))
    return SummarisedSlice::kRead;
  const int radius = max(gaussian_radius_px(sx, p.cutoff_sigmas), gaussian_radius_px(sy, p.cutoff_sigmas));
  return radius <= kMaxKernelRadiusPx ? SummarisedSlice::kUniform : SummarisedSlice::kRead;
}

/// Threads per slice of reset_analysis_kernel.
constexpr int kResetLanesPerSlice = 32;

/// Resets the scratch (a warp per slice, and a thread per bucket slot). A
/// slice its summary settles gets what analyse_tiles_kernel would have found
/// for it — radius, σ range, largest value, and no bucketed tile; the others
/// are listed for analyse_tiles_kernel to read. The warp's lanes clear the
/// slice's tile radii together, coalesced (a thread per slice, writing them
/// one after another with a stride of the tile count, took 24 µs for the
/// water cube's 3,211 slices of 66 tiles, H200, at the head of the core
/// superposition).
__global__ void reset_analysis_kernel(StackParams p, StackAnalysis a) {
  const long long thread = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (thread < kBucketCountSlots) a.bucket_count[thread] = 0;
  const long long t = thread / kResetLanesPerSlice;
  const int lane = static_cast<int>(thread % kResetLanesPerSlice);
  if (t >= p.slices) return;
  unsigned int* bits = a.slice_sigma_bits + 4 * t;
  const SummarisedSlice settled = summarised_slice(p, static_cast<int>(t));
  if (lane == 0) {
    a.slice_radius[t] = -1;
    bits[0] = bits[2] = UINT_MAX;  // minima
    bits[1] = bits[3] = 0u;        // maxima
    if (settled == SummarisedSlice::kRead) a.read_slices[atomicAdd(a.read_slice_count, 1)] = static_cast<int>(t);
  }
  if (settled == SummarisedSlice::kRead) return;
  const std::size_t tiles = static_cast<std::size_t>(p.tiles_x) * p.tiles_y;
  for (std::size_t i = lane; i < tiles; i += kResetLanesPerSlice)
    a.tile_radius[static_cast<std::size_t>(t) * tiles + i] = -1;  // separable or empty: no bucket
  if (settled == SummarisedSlice::kUniform && lane == 0) {
    const std::size_t n = static_cast<std::size_t>(p.slices);
    const unsigned long long key = p.slice_summary[kSummaryMaxSigmaKey * n + t];
    bits[0] = bits[1] = static_cast<unsigned int>(key >> 32);
    bits[2] = bits[3] = static_cast<unsigned int>(key & 0xffffffffull);
    a.slice_radius[t] = max(gaussian_radius_px(__uint_as_float(bits[1]), p.cutoff_sigmas),
                            gaussian_radius_px(__uint_as_float(bits[3]), p.cutoff_sigmas));
    atomicMax(a.max_image_bits, static_cast<unsigned int>(p.slice_summary[kSummaryMaxImage * n + t]));
  }
}

/// The scalars reset_analysis_kernel's slice threads add to (one thread):
/// launched before it.
__global__ void reset_analysis_scalars_kernel(StackAnalysis a) {
  *a.fixed_scale = 1.0;
  *a.max_image_bits = 0u;
  *a.first_invalid = ULLONG_MAX;
  *a.device_launch_error = 0;
  *a.read_slice_count = 0;
}

/// Block-wide minimum or maximum of non-negative floats through their bits.
__device__ inline void shared_min_bits(unsigned int* target, float v) { atomicMin(target, __float_as_uint(v)); }
__device__ inline void shared_max_bits(unsigned int* target, float v) { atomicMax(target, __float_as_uint(v)); }

/// Blocks of analyse_tiles_kernel per tile column (gridDim.z), at most: each
/// reads every gridDim.z-th listed slice. A block per tile and slice was
/// 212,000 blocks of 512 pixels for the water cube's stack, at half the
/// H100's memory bandwidth; four slices per block then reached 2.5 TB/s (H200),
/// but with every slice settled by the stack's summary, its 53,000 blocks
/// still took 213 µs (each waited on four summary loads in turn).
constexpr int kAnalysisBlocksPerTile = 128;
/// Slices per block where the stack has fewer than kAnalysisBlocksPerTile ×
/// this: the benchmark's 64 × 512² stack, one slice per block, was read at
/// 55 % of an H100's DRAM bandwidth (ncu, 111 µs for 201 MB).
constexpr int kAnalysisSlicesPerBlock = 4;

/// One block per tile column (tx, ty) and blockIdx.z: the listed slices
/// blockIdx.z, + gridDim.z, … (reset_analysis_kernel's read list): each
/// tile's radius, the σ range of its non-zero pixels, invalid pixels, the
/// largest value. Buckets are filled afterwards (bucket_tiles_kernel), once
/// every slice's σ range is known.
template <bool kBoxed>
__global__ void analyse_tiles_kernel(StackParams p, StackAnalysis a) {
  constexpr int kRowsPerThread = kTileRows / kBlockRows;
  const int tx = blockIdx.x, ty = blockIdx.y;
  const int x = tx * kTileCols + threadIdx.x;
  __shared__ int tile_radius;
  __shared__ unsigned int tile_largest;
  __shared__ unsigned int tile_sigma_bits[4];  // min σx, max σx, min σy, max σy
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
  const int listed = *a.read_slice_count;
  // The pixels of slice s, row j of this thread; zeros outside the slice's
  // box (SuperpositionInput::slice_box: zeros there by the producer's word).
  // Loaded a slice ahead: the next slice's loads are in flight while this
  // one's checks, barriers and atomics run.
  float v[kRowsPerThread], sx[kRowsPerThread], sy[kRowsPerThread];
  float next_v[kRowsPerThread], next_sx[kRowsPerThread], next_sy[kRowsPerThread];
  const auto load = [&](int slice, float(&value)[kRowsPerThread], float(&sigma_x)[kRowsPerThread],
                        float(&sigma_y)[kRowsPerThread]) {
    const SliceBox box = slice_box_of<kBoxed>(p.slice_box, slice, p.rows, p.cols);
    const bool column_in = in_range(x, box.col_begin, box.col_end);
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int y = ty * kTileRows + threadIdx.y + j * kBlockRows;
      const bool in = column_in && in_range(y, box.row_begin, box.row_end);
      const std::size_t i = (static_cast<std::size_t>(slice) * p.rows + y) * p.cols + x;
      value[j] = in ? p.image[i] : 0.0f;
      sigma_x[j] = in ? p.sigma_x[i] : 0.0f;
      sigma_y[j] = in ? p.sigma_y[i] : 0.0f;
    }
  };
  if (static_cast<int>(blockIdx.z) >= listed) return;
  unsigned int block_largest = 0u;  // the leader's: bits of the largest value of the block's tiles
  int s = a.read_slices[blockIdx.z];
  load(s, next_v, next_sx, next_sy);
  for (int listed_index = blockIdx.z; listed_index < listed; listed_index += gridDim.z) {
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      v[j] = next_v[j];
      sx[j] = next_sx[j];
      sy[j] = next_sy[j];
    }
    const int next_s = listed_index + gridDim.z < listed ? a.read_slices[listed_index + gridDim.z] : -1;
    if (next_s >= 0) load(next_s, next_v, next_sx, next_sy);
    bool inside[kRowsPerThread];
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j)
      inside[j] = x < p.cols && ty * kTileRows + static_cast<int>(threadIdx.y) + j * kBlockRows < p.rows;
    // The output's clearing rides on the analysis's reads (201 MB read and
    // 67 MB written for a 64 × 512² stack: 10–20 µs less than a memset
    // after the round trip, docs/benchmarks.md run 66).
    if (p.clear_output_in_analysis) {
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        if (!inside[j]) continue;
        const int y = ty * kTileRows + threadIdx.y + j * kBlockRows;
        const std::size_t i = (static_cast<std::size_t>(s) * p.rows + y) * p.cols + x;
        if (p.out_fixed)
          p.out_fixed[i] = 0ull;
        else
          p.out[i] = 0.0f;
      }
    }
    int radius = -1;
    float largest = 0.0f;
    float sx_min = INFINITY, sx_max = 0.0f, sy_min = INFINITY, sy_max = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      if (!inside[j]) continue;
      bool valid = is_valid_value(v[j]) && is_valid_value(sx[j]) && is_valid_value(sy[j]);
      int r = 0;
      if (valid) {
        r = max(gaussian_radius_px(sx[j], p.cutoff_sigmas), gaussian_radius_px(sy[j], p.cutoff_sigmas));
        valid = r <= kMaxKernelRadiusPx;
      }
      if (!valid) {
        const int y = ty * kTileRows + threadIdx.y + j * kBlockRows;
        atomicMin(a.first_invalid, (static_cast<unsigned long long>(s) * p.rows + y) * p.cols + x);
      } else if (v[j] > 0.0f) {
        radius = max(radius, r);
        largest = fmaxf(largest, v[j]);
        sx_min = fminf(sx_min, sx[j]);
        sx_max = fmaxf(sx_max, sx[j]);
        sy_min = fminf(sy_min, sy[j]);
        sy_max = fmaxf(sy_max, sy[j]);
      }
    }
    if (leader) {
      tile_radius = -1;
      tile_largest = 0u;
      tile_sigma_bits[0] = tile_sigma_bits[2] = UINT_MAX;
      tile_sigma_bits[1] = tile_sigma_bits[3] = 0u;
    }
    __syncthreads();
    if (radius >= 0) {
      atomicMax(&tile_radius, radius);
      atomicMax(&tile_largest, __float_as_uint(largest));  // order-preserving for floats >= 0
      shared_min_bits(tile_sigma_bits + 0, sx_min);
      shared_max_bits(tile_sigma_bits + 1, sx_max);
      shared_min_bits(tile_sigma_bits + 2, sy_min);
      shared_max_bits(tile_sigma_bits + 3, sy_max);
    }
    __syncthreads();
    if (leader) {
      const int tile = (s * p.tiles_y + ty) * p.tiles_x + tx;
      a.tile_radius[tile] = tile_radius;
      if (tile_radius >= 0) {
        atomicMax(a.slice_radius + s, tile_radius);
        block_largest = max(block_largest, tile_largest);
        unsigned int* slice_bits = a.slice_sigma_bits + 4 * static_cast<std::size_t>(s);
        atomicMin(slice_bits + 0, tile_sigma_bits[0]);
        atomicMax(slice_bits + 1, tile_sigma_bits[1]);
        atomicMin(slice_bits + 2, tile_sigma_bits[2]);
        atomicMax(slice_bits + 3, tile_sigma_bits[3]);
      }
    }
    // No third barrier: the leader reads the tile's values, and resets them
    // for the next slice, before that slice's first barrier, which every
    // other thread's atomics on them follow.
    s = next_s;
  }
  // The stack's largest value: one atomic per block, not per tile and slice
  // (212,000 of them on one address for the water cube's stack).
  if (leader && block_largest != 0u) atomicMax(a.max_image_bits, block_largest);
}

/// True when every non-zero pixel of slice s has the same σx and the same σy
/// (false for an all-zero slice: its minima exceed its maxima).
__device__ inline bool slice_is_uniform(const StackAnalysis& a, int s) {
  const unsigned int* bits = a.slice_sigma_bits + 4 * static_cast<std::size_t>(s);
  return bits[0] == bits[1] && bits[2] == bits[3];
}

/// True when slice s runs as separable passes (bucket_tiles_kernel's test).
__device__ inline bool slice_is_separable(const StackParams& p, const StackAnalysis& a, int s) {
  return p.separable_uniform_slices && a.slice_radius[s] >= 0 && slice_is_uniform(a, s);
}

/// One thread per tile (and, for t < slices, per slice): appends each non-zero
/// tile to its radius bucket; with p.separable_uniform_slices, the tiles of
/// uniform slices stay out of the buckets and those slices are listed instead.
/// Each bucket has room for every tile. The lanes of a warp with the same
/// bucket take their slots with one atomic: neighbouring tiles mostly share
/// a radius, and one counter per tile was 32,768 atomics on one address for
/// the benchmark's 64 × 512² stack at r_max 8.
__global__ void bucket_tiles_kernel(StackParams p, StackAnalysis a) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < p.slices) {
    int slot = -1;
    if (slice_is_separable(p, a, t)) {
      slot = atomicAdd(a.bucket_count + kUniformSliceCountSlot, 1);
      a.uniform_slices[slot] = t;
      atomicMax(a.bucket_count + kUniformMaxRadiusSlot, a.slice_radius[t]);
    }
    a.uniform_index[t] = slot;
  }
  // Every lane of the warp reaches the vote (blockDim.x is a multiple of 32):
  // −1 for no bucket (past the last tile, an all-zero tile, a separable slice).
  int bucket = -1;
  if (t < p.tile_count()) {
    const int radius = a.tile_radius[t];
    if (radius >= 0 && !slice_is_separable(p, a, t / (p.tiles_x * p.tiles_y))) bucket = min(radius, kGeneralBucket);
  }
  const unsigned peers = __match_any_sync(0xffffffffu, bucket);
  if (bucket < 0) return;
  const int lane = static_cast<int>(threadIdx.x % 32), leader = __ffs(peers) - 1;
  int first = 0;
  if (lane == leader) first = atomicAdd(a.bucket_count + bucket, __popc(peers));
  first = __shfl_sync(peers, first, leader);
  const int slot = first + __popc(peers & ((1u << lane) - 1u));
  a.bucket_tiles[static_cast<std::size_t>(bucket) * p.tile_count() + slot] = t;
}

/// The deterministic-mode scale, from the largest image value (one thread).
__device__ void compute_fixed_scale(const StackAnalysis& a, double pixel_count) {
  // Every output value is at most Σ image ≤ pixel_count · max(image) (each
  // pixel's weights sum to ≤ 1), so a scale of 2^61 / that bound (rounded down
  // to a power of two) can neither overflow 64 bits nor lose more than
  // ~2^-61 of the total per addition. Power of two: exact, reproducible.
  const double largest = static_cast<double>(__uint_as_float(*a.max_image_bits));
  double scale = 1.0;
  if (largest > 0.0) {
    int exponent = 0;
    frexp(pixel_count * largest, &exponent);  // bound < 2^exponent
    scale = ldexp(1.0, 61 - exponent);
  }
  *a.fixed_scale = scale;
}

__global__ void fixed_scale_kernel(StackAnalysis a, double pixel_count) { compute_fixed_scale(a, pixel_count); }

/// Zeroes the output of every slice that does not run as separable passes
/// (blockIdx.y: the slice; four pixels per thread): the scatter adds into its
/// output, while the column pass writes every pixel of a separable slice.
__global__ void clear_scattered_slices_kernel(StackParams p, StackAnalysis a) {
  const int s = blockIdx.y;
  if (slice_is_separable(p, a, s)) return;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  const std::size_t first = static_cast<std::size_t>(s) * plane;
  for (std::size_t i = 4 * (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x), end = std::min(i + 4, plane);
       i < end; ++i) {
    if (p.out_fixed)
      p.out_fixed[first + i] = 0ull;
    else
      p.out[first + i] = 0.0f;
  }
}

// ---------------------------------------------------------------- superposition kernels

/// The shared-memory tile scatter (the paper's "volatile" warp-synchronous
/// design, made correct under independent thread scheduling).
///
/// Each thread reads its pixel and σ once and computes its 1D weights once. The
/// block accumulates into a shared (kTileRows+2R) × (kTileCols+2R) tile:
///  - within a warp, for a given (dy, dx) the 32 lanes update 32 consecutive
///    cells (no conflict); __syncwarp() between dx steps orders lane i's update
///    of a cell before lane i+1's update of the same cell at the next step;
///  - across warps, for a given dy every warp owns a different tile row;
///    __syncthreads() between dy steps keeps the warps on the same dy.
/// The tile is then flushed with one atomic per non-zero cell (tiles overlap in
/// their halos). No atomics in the inner loop.
template <int R>
__global__ void __launch_bounds__(kTileCols* kBlockRows)
    scatter_tiled_kernel(StackParams p, const int* tile_list) {
  constexpr int kW = kTileCols + 2 * R;
  constexpr int kH = kTileRows + 2 * R;
  constexpr int kPixelsPerThread = kTileRows / kBlockRows;
  __shared__ float acc[kH * kW];

  const int tile = tile_list ? tile_list[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int tx = tile % p.tiles_x;
  const int ty = (tile / p.tiles_x) % p.tiles_y;
  const int s = tile / (p.tiles_x * p.tiles_y);
  const int lane = threadIdx.x, warp = threadIdx.y;
  const int x0 = tx * kTileCols, y0 = ty * kTileRows;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;

  for (int c = warp * kTileCols + lane; c < kH * kW; c += kTileCols * kBlockRows) acc[c] = 0.0f;

  float value[kPixelsPerThread], ax[kPixelsPerThread], ay[kPixelsPerThread];
  int rx[kPixelsPerThread], ry[kPixelsPerThread];
  bool any = false;
  const SliceBox box = read_box(p, s);
#pragma unroll
  for (int k = 0; k < kPixelsPerThread; ++k) {
    const int x = x0 + lane, y = y0 + warp + k * kBlockRows;
    value[k] = 0.0f;
    ax[k] = ay[k] = 0.0f;
    rx[k] = ry[k] = 0;
    if (in_range(x, box.col_begin, box.col_end) && in_range(y, box.row_begin, box.row_end)) {
      const std::size_t i = s * plane + static_cast<std::size_t>(y) * p.cols + x;
      value[k] = p.image[i];
      const float sx = p.sigma_x[i], sy = p.sigma_y[i];
      ax[k] = erf_scale(sx);
      ay[k] = erf_scale(sy);
      rx[k] = gaussian_radius_px(sx, p.cutoff_sigmas);
      ry[k] = gaussian_radius_px(sy, p.cutoff_sigmas);
    }
    any |= value[k] > 0.0f;
  }
  // Skip all-zero tiles (the barrier also publishes the zeroed tile).
  if (!__syncthreads_or(any)) return;

#pragma unroll 1
  for (int k = 0; k < kPixelsPerThread; ++k) {
    float kx[R + 1];
#pragma unroll
    for (int d = 0; d <= R; ++d) kx[d] = d <= rx[k] ? gaussian_weight(d, ax[k]) : 0.0f;
    // Cell of tap (dy, dx) of this thread: row (warp + k·kBlockRows) + dy + R,
    // column lane + dx + R.
    float* base = acc + (warp + k * kBlockRows) * kW + lane;
    const float v = value[k];

    // One row of taps at vertical offset dy with weight wy = v · K(|dy|).
    auto scatter_row = [&](int row, float wy) {
      float* cell = base + row * kW;
#pragma unroll
      for (int i = 0; i <= 2 * R; ++i) {
        cell[i] += wy * kx[i < R ? R - i : i - R];
        __syncwarp();
      }
      __syncthreads();
    };

    if constexpr (R <= 12) {
      float ky[R + 1];
#pragma unroll
      for (int d = 0; d <= R; ++d) ky[d] = d <= ry[k] ? gaussian_weight(d, ay[k]) : 0.0f;
#pragma unroll
      for (int j = 0; j <= 2 * R; ++j) scatter_row(j, v * ky[j < R ? R - j : j - R]);
    } else {
      // Large radii: ky is not unrolled into registers; each row's weight is
      // computed as its row comes (one weight per 2R + 1 taps). The control
      // flow is the same for every thread (σ = 0 included): every thread
      // must reach the same barriers in scatter_row.
      for (int j = 0; j <= 2 * R; ++j) {
        const int d = j < R ? R - j : j - R;
        scatter_row(j, d <= ry[k] ? v * gaussian_weight(d, ay[k]) : 0.0f);
      }
    }
  }

  // Flush: the last scatter_row ended with __syncthreads(), so the tile is complete.
  for (int c = warp * kTileCols + lane; c < kH * kW; c += kTileCols * kBlockRows) {
    const float cell = acc[c];
    if (cell == 0.0f) continue;
    const int gy = y0 - R + c / kW, gx = x0 - R + c % kW;
    if (gy < 0 || gy >= p.rows || gx < 0 || gx >= p.cols) continue;  // clipped output grid
    accumulate(p, s * plane + static_cast<std::size_t>(gy) * p.cols + gx, cell);
  }
}

/// Register-blocked scatter (issue "beyond the shared-memory ceiling"): the
/// tile design spends one shared-memory read-modify-write per tap; here each
/// thread owns a strip of T pixels of one column and, for each horizontal
/// offset dx, sums the contributions of its T pixels to the T + 2R cells of the
/// target column in registers (T·(2R+1) FMAs), then adds them to shared memory
/// in T + 2R read-modify-writes — (2R+1)·T/(T+2R) times fewer than one per tap.
///
/// One warp per 32 × kTileRows bucket tile, processing it as kTileRows/T strips
/// into its own (kTileRows+2R) × (32+2R) shared tile: no other warp touches the
/// tile, so the only ordering needed is __syncwarp() between dx steps (lane i
/// and lane i+1 update the same column one step apart) and between strips.
/// kx of the strip's pixels lives in shared memory ([t][d][lane], read once
/// per dx), ky in registers. The tile is flushed like the tile scatter's.
template <int R, int T>
__global__ void __launch_bounds__(kTileCols)
    scatter_register_blocked_kernel(StackParams p, const int* tile_list) {
  static_assert(kTileRows % T == 0, "strips must cover the tile");
  constexpr int kW = kTileCols + 2 * R;
  constexpr int kH = kTileRows + 2 * R;
  extern __shared__ float smem[];
  float* acc = smem;                 // kH × kW
  float* kx_table = smem + kH * kW;  // [T][R + 1][32]

  const int tile = tile_list ? tile_list[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int tx = tile % p.tiles_x;
  const int ty = (tile / p.tiles_x) % p.tiles_y;
  const int s = tile / (p.tiles_x * p.tiles_y);
  const int lane = threadIdx.x;
  const int x0 = tx * kTileCols, y0 = ty * kTileRows;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  const int x = x0 + lane;
  const SliceBox box = read_box(p, s);
  const bool column_inside = in_range(x, box.col_begin, box.col_end);

  for (int c = lane; c < kH * kW; c += kTileCols) acc[c] = 0.0f;

#pragma unroll 1
  for (int strip = 0; strip < kTileRows; strip += T) {
    float v[T], ky[T][R + 1];
    bool any = false;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const int y = y0 + strip + t;
      float ax = 0.0f, ay = 0.0f;
      int rx = 0, ry = 0;
      v[t] = 0.0f;
      if (column_inside && in_range(y, box.row_begin, box.row_end)) {
        const std::size_t i = s * plane + static_cast<std::size_t>(y) * p.cols + x;
        v[t] = p.image[i];
        ax = erf_scale(p.sigma_x[i]);
        ay = erf_scale(p.sigma_y[i]);
        rx = gaussian_radius_px(p.sigma_x[i], p.cutoff_sigmas);
        ry = gaussian_radius_px(p.sigma_y[i], p.cutoff_sigmas);
      }
      any |= v[t] > 0.0f;
#pragma unroll
      for (int d = 0; d <= R; ++d) {
        ky[t][d] = d <= ry ? gaussian_weight(d, ay) : 0.0f;
        kx_table[(t * (R + 1) + d) * kTileCols + lane] = d <= rx ? gaussian_weight(d, ax) : 0.0f;
      }
    }
    // The previous strip's last update and this strip's kx table are ordered
    // for the whole warp before anyone reads them.
    __syncwarp();
    if (!__any_sync(0xffffffffu, any)) continue;  // warp-uniform: all-zero strip

#pragma unroll 1
    for (int i = 0; i <= 2 * R; ++i) {  // dx = i − R
      const int d = i < R ? R - i : i - R;
      float u[T];
#pragma unroll
      for (int t = 0; t < T; ++t) u[t] = v[t] * kx_table[(t * (R + 1) + d) * kTileCols + lane];
      // Column lane + dx + R of the tile; row strip + j of the tile for output
      // row (y0 + strip − R + j).
      float* column = acc + strip * kW + lane + i;
#pragma unroll
      for (int j = 0; j < T + 2 * R; ++j) {
        float sum = 0.0f;
#pragma unroll
        for (int t = 0; t < T; ++t) {
          const int dy = j - t - R;  // compile-time after unrolling
          if (dy >= -R && dy <= R) sum += u[t] * ky[t][dy < 0 ? -dy : dy];
        }
        column[j * kW] += sum;
      }
      __syncwarp();
    }
  }

  for (int c = lane; c < kH * kW; c += kTileCols) {
    const float cell = acc[c];
    if (cell == 0.0f) continue;
    const int gy = y0 - R + c / kW, gx = x0 - R + c % kW;
    if (gy < 0 || gy >= p.rows || gx < 0 || gx >= p.cols) continue;  // clipped output grid
    accumulate(p, s * plane + static_cast<std::size_t>(gy) * p.cols + gx, cell);
  }
}

/// Global-atomics scatter: one thread per input pixel, any radius (the paper's
/// lower bound, and the general path for tiles whose radius exceeds the
/// largest template). Grid: one block per tile (tile_list) or per tile of the stack.
__global__ void __launch_bounds__(kTileCols* kBlockRows)
    scatter_atomic_kernel(StackParams p, const int* tile_list) {
  const int tile = tile_list ? tile_list[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int tx = tile % p.tiles_x;
  const int ty = (tile / p.tiles_x) % p.tiles_y;
  const int s = tile / (p.tiles_x * p.tiles_y);
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  const int x = tx * kTileCols + threadIdx.x;
  const SliceBox box = read_box(p, s);
  if (!in_range(x, box.col_begin, box.col_end)) return;
  for (int row = threadIdx.y; row < kTileRows; row += kBlockRows) {
    const int y = ty * kTileRows + row;
    if (!in_range(y, box.row_begin, box.row_end)) continue;
    const std::size_t i = s * plane + static_cast<std::size_t>(y) * p.cols + x;
    const float v = p.image[i];
    if (v == 0.0f) continue;
    const float ax = erf_scale(p.sigma_x[i]), ay = erf_scale(p.sigma_y[i]);
    const int rx = gaussian_radius_px(p.sigma_x[i], p.cutoff_sigmas);
    const int ry = gaussian_radius_px(p.sigma_y[i], p.cutoff_sigmas);
    const int ylo = max(0, y - ry), yhi = min(p.rows - 1, y + ry);
    const int xlo = max(0, x - rx), xhi = min(p.cols - 1, x + rx);
    for (int yo = ylo; yo <= yhi; ++yo) {
      const float wy = v * gaussian_weight(abs(yo - y), ay);
      for (int xo = xlo; xo <= xhi; ++xo)
        accumulate(p, s * plane + static_cast<std::size_t>(yo) * p.cols + xo,
                   wy * gaussian_weight(abs(xo - x), ax));
    }
  }
}

/// Exact gather (the paper's naive gather): each output pixel sums over the
/// neighbourhood of its slice's largest radius, evaluating Eq. 4 per neighbour.
__global__ void gather_exact_kernel(StackParams p, const int* slice_radius) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int s = blockIdx.z;
  if (x >= p.cols || y >= p.rows) return;
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  const int R = slice_radius[s];
  const SliceBox box = read_box(p, s);
  float sum = 0.0f;
  for (int dy = -R; dy <= R; ++dy) {
    const int yi = y + dy;
    if (!in_range(yi, box.row_begin, box.row_end)) continue;
    for (int dx = -R; dx <= R; ++dx) {
      const int xi = x + dx;
      if (!in_range(xi, box.col_begin, box.col_end)) continue;
      const std::size_t i = s * plane + static_cast<std::size_t>(yi) * p.cols + xi;
      const float v = p.image[i];
      if (v == 0.0f) continue;
      const float sx = p.sigma_x[i], sy = p.sigma_y[i];
      if (abs(dx) > gaussian_radius_px(sx, p.cutoff_sigmas) ||
          abs(dy) > gaussian_radius_px(sy, p.cutoff_sigmas))
        continue;
      sum += v * gaussian_weight(abs(dx), erf_scale(sx)) * gaussian_weight(abs(dy), erf_scale(sy));
    }
  }
  p.out[s * plane + static_cast<std::size_t>(y) * p.cols + x] = sum;
}

// ---------------------------------------------------------------- separable passes (uniform-σ slices)

/// One block per uniform slice k: its radii and weights K(d, σ), d = 0 … r,
/// for the separable passes of convolution_kernels.cu — the tile scatter's own
/// float weights (gaussian_weight), so the passes sum exactly the scatter's taps.
__global__ void uniform_slice_weights_kernel(StackParams p, StackAnalysis a, int stride, int* radius_x,
                                             int* radius_y, float* weights_x, float* weights_y) {
  const int k = blockIdx.x;
  const unsigned int* bits = a.slice_sigma_bits + 4 * static_cast<std::size_t>(a.uniform_slices[k]);
  const float sigma_x = __uint_as_float(bits[0]), sigma_y = __uint_as_float(bits[2]);
  const int rx = gaussian_radius_px(sigma_x, p.cutoff_sigmas), ry = gaussian_radius_px(sigma_y, p.cutoff_sigmas);
  if (threadIdx.x == 0) {
    radius_x[k] = rx;
    radius_y[k] = ry;
  }
  const float ax = erf_scale(sigma_x), ay = erf_scale(sigma_y);
  for (int d = threadIdx.x; d < stride; d += blockDim.x) {
    weights_x[static_cast<std::size_t>(k) * stride + d] = d <= rx ? gaussian_weight(d, ax) : 0.0f;
    weights_y[static_cast<std::size_t>(k) * stride + d] = d <= ry ? gaussian_weight(d, ay) : 0.0f;
  }
}

/// launch_group_sums: one thread per pixel of a group's plane.
__global__ void group_sums_kernel(StackParams p, int first_group) {
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const int g = first_group + blockIdx.y;
  if (i >= plane) return;
  float* out = p.groups.out + static_cast<std::size_t>(g) * plane + i;
  float v = *out;
  for (int m = p.groups.member_begin[g]; m < p.groups.member_begin[g + 1]; ++m)
    v += p.out[static_cast<std::size_t>(p.groups.member_slices[m]) * plane + i];
  *out = v;
}

__global__ void fixed_to_float_kernel(StackParams p, std::size_t count) {
  const double inverse = 1.0 / *p.fixed_scale;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p.out[i] = static_cast<float>(static_cast<double>(p.out_fixed[i]) * inverse);
}

// ---------------------------------------------------------------- device-side dispatch

/// Launches the tile kernel of radius `radius` over `count` tiles from the
/// device, into the fire-and-forget stream so the buckets run concurrently.
template <int R>
__device__ void launch_tiled_bucket(int radius, int count, const int* tiles, const StackParams& p) {
  if (radius == R) {
    scatter_tiled_kernel<R><<<count, dim3(kTileCols, kBlockRows), 0, cudaStreamFireAndForget>>>(p, tiles);
  } else if constexpr (R > 0) {
    launch_tiled_bucket<R - 1>(radius, count, tiles, p);
  }
}

/// One thread per bucket: launches the bucket's kernel if it holds tiles.
/// Largest radii first: they are the longest-running grids.
__global__ void dispatch_buckets_kernel(StackParams p, StackAnalysis a, double pixel_count) {
  // The scale is written before any child is launched: a child grid sees the
  // parent's global writes made before its launch.
  if (threadIdx.x == 0) compute_fixed_scale(a, pixel_count);
  __syncthreads();
  const int bucket = kBucketCount - 1 - static_cast<int>(threadIdx.x);
  if (bucket < 0) return;
  const int count = a.bucket_count[bucket];
  if (count == 0) return;
  const int* tiles = a.bucket_tiles + static_cast<std::size_t>(bucket) * p.tile_count();
  if (bucket == kGeneralBucket)
    scatter_atomic_kernel<<<count, dim3(kTileCols, kBlockRows), 0, cudaStreamFireAndForget>>>(p, tiles);
  else
    launch_tiled_bucket<kMaxTileRadiusPx>(bucket, count, tiles, p);
  // A launch refused on the device (e.g. the pending-launch limit) is only
  // seen here; the host reads it back with the invalid-pixel flag.
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) atomicCAS(a.device_launch_error, 0, static_cast<int>(launched));
}

template <int R>
void launch_fixed_radius(int radius, const StackParams& p, cudaStream_t stream) {
  if (radius == R) {
    scatter_tiled_kernel<R><<<p.tile_count(), dim3(kTileCols, kBlockRows), 0, stream>>>(p, nullptr);
  } else if constexpr (R > 0) {
    launch_fixed_radius<R - 1>(radius, p, stream);
  }
}

template <int R>
void launch_bucket_from_host(int radius, int count, const int* tiles, const StackParams& p, cudaStream_t stream) {
  if (radius == R) {
    scatter_tiled_kernel<R><<<count, dim3(kTileCols, kBlockRows), 0, stream>>>(p, tiles);
  } else if constexpr (R > 0) {
    launch_bucket_from_host<R - 1>(radius, count, tiles, p, stream);
  }
}

std::size_t align16(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

// ---------------------------------------------------------------- launchers

std::size_t analysis_bytes(const StackParams& p) {
  const std::size_t tiles = static_cast<std::size_t>(p.tile_count());
  const std::size_t slices = static_cast<std::size_t>(p.slices);
  return align16(sizeof(double)) + align16(sizeof(unsigned long long)) + align16(sizeof(unsigned int)) + align16(sizeof(int)) +
         align16(kBucketCountSlots * sizeof(int)) + align16(kBucketCount * tiles * sizeof(int)) +
         align16(slices * sizeof(int)) + align16(tiles * sizeof(int)) + align16(4 * slices * sizeof(unsigned int)) +
         align16(slices * sizeof(int)) + align16(slices * sizeof(int)) + align16(sizeof(int)) +
         align16(slices * sizeof(int));
}

StackAnalysis analysis_layout(const StackParams& p, void* scratch) {
  char* cursor = static_cast<char*>(scratch);
  auto take = [&cursor](std::size_t bytes) {
    char* here = cursor;
    cursor += align16(bytes);
    return here;
  };
  const std::size_t tiles = static_cast<std::size_t>(p.tile_count());
  StackAnalysis a;
  a.fixed_scale = reinterpret_cast<double*>(take(sizeof(double)));
  a.first_invalid = reinterpret_cast<unsigned long long*>(take(sizeof(unsigned long long)));
  a.max_image_bits = reinterpret_cast<unsigned int*>(take(sizeof(unsigned int)));
  a.device_launch_error = reinterpret_cast<int*>(take(sizeof(int)));
  a.bucket_count = reinterpret_cast<int*>(take(kBucketCountSlots * sizeof(int)));
  a.bucket_tiles = reinterpret_cast<int*>(take(kBucketCount * tiles * sizeof(int)));
  a.slice_radius = reinterpret_cast<int*>(take(p.slices * sizeof(int)));
  a.tile_radius = reinterpret_cast<int*>(take(tiles * sizeof(int)));
  a.slice_sigma_bits = reinterpret_cast<unsigned int*>(take(4 * static_cast<std::size_t>(p.slices) * sizeof(unsigned int)));
  a.uniform_slices = reinterpret_cast<int*>(take(p.slices * sizeof(int)));
  a.read_slices = reinterpret_cast<int*>(take(p.slices * sizeof(int)));
  a.read_slice_count = reinterpret_cast<int*>(take(sizeof(int)));
  a.uniform_index = reinterpret_cast<int*>(take(p.slices * sizeof(int)));
  return a;
}

void launch_analyse(const StackParams& p, const StackAnalysis& a, cudaStream_t stream) {
  const long long reset_threads =
      std::max(static_cast<long long>(kBucketCountSlots), static_cast<long long>(p.slices) * kResetLanesPerSlice);
  reset_analysis_scalars_kernel<<<1, 1, 0, stream>>>(a);
  PD_CUDA_CHECK_LAUNCH("reset_analysis_scalars_kernel");
  reset_analysis_kernel<<<static_cast<unsigned>((reset_threads + 255) / 256), 256, 0, stream>>>(p, a);
  PD_CUDA_CHECK_LAUNCH("reset_analysis_kernel");
  // Sized for every slice (the host does not know how many the summary
  // settles); with none to read, each block reads the count and ends.
  const int blocks_per_tile =
      std::min(kAnalysisBlocksPerTile, (p.slices + kAnalysisSlicesPerBlock - 1) / kAnalysisSlicesPerBlock);
  const dim3 grid(p.tiles_x, p.tiles_y, blocks_per_tile), block(kTileCols, kBlockRows);
  if (p.slice_box)
    analyse_tiles_kernel<true><<<grid, block, 0, stream>>>(p, a);
  else
    analyse_tiles_kernel<false><<<grid, block, 0, stream>>>(p, a);
  PD_CUDA_CHECK_LAUNCH("analyse_tiles_kernel");
  // Every slice has at least one tile, so tile_count() threads cover the slices too.
  bucket_tiles_kernel<<<(p.tile_count() + 255) / 256, 256, 0, stream>>>(p, a);
  PD_CUDA_CHECK_LAUNCH("bucket_tiles_kernel");
}

namespace {

double pixel_count_of(const StackParams& p) {
  return static_cast<double>(p.slices) * p.rows * static_cast<double>(p.cols);
}

/// The separable row and column passes of convolution_kernels.cu over the
/// `count` uniform slices of the analysis, radii up to max_radius.
/// With p.groups (and no fixed-point output), only the row pass: the column
/// pass then sums into the groups (launch_grouped_columns) once the
/// scatter has written the other slices.
ConvolutionParams launch_separable_uniform_slices(const StackParams& p, const StackAnalysis& a, int count,
                                                  int max_radius, SeparableScratch& scratch, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(count);
  const int stride = max_radius + 1;
  scratch.rows.reserve(n * p.rows * p.cols);
  scratch.weights.reserve(2 * n * stride);
  scratch.radii.reserve(2 * n);
  ConvolutionParams c;
  c.slices = count;
  c.rows = p.rows;
  c.cols = p.cols;
  c.max_radius = max_radius;
  c.radius_x = scratch.radii.get();
  c.radius_y = scratch.radii.get() + n;
  c.weights_x = scratch.weights.get();
  c.weights_y = scratch.weights.get() + n * stride;
  c.slice_of = a.uniform_slices;
  c.slice_box = p.slice_box;
  c.out_fixed = p.out_fixed;
  c.fixed_scale = p.fixed_scale;
  uniform_slice_weights_kernel<<<count, 128, 0, stream>>>(p, a, stride, scratch.radii.get(), scratch.radii.get() + n,
                                                         scratch.weights.get(), scratch.weights.get() + n * stride);
  PD_CUDA_CHECK_LAUNCH("uniform_slice_weights_kernel");
  set_convolution_shared_memory_limits(max_radius);
  if (p.groups.count > 0 && !p.out_fixed)
    launch_separable_rows(c, p.image, scratch.rows.get(), stream);
  else
    launch_separable(c, p.image, scratch.rows.get(), p.out, stream);
  return c;
}

/// The fixed-point scale (deterministic mode), one read-back of the bucket sizes, then one launch
/// per non-empty bucket, largest radii first: `launch_radius(r, count, tiles,
/// stream)` for r ≤ kMaxTileRadiusPx, the global-atomics kernel for the
/// general bucket; the buckets spread over `buckets`' side streams.
template <class LaunchRadius>
DispatchCounts launch_buckets_from_host(const StackParams& p, const StackAnalysis& a, SeparableScratch& separable_scratch,
                                        BucketDispatch& buckets, cudaStream_t stream, LaunchRadius&& launch_radius) {
  const int* counts = buckets.read_counts(p, a, stream);
  HostTimeline::mark("superposer: bucket counts back");
  DispatchCounts dispatched;
  dispatched.uniform_slices = counts[kUniformSliceCountSlot];
  // The output was not cleared up front (DeviceSuperposer): the column pass
  // writes every pixel of a separable slice, the scatter adds into the rest.
  // At 95 M pixels (the water cube's stack, every slice separable) a clearing
  // memset was ~0.13 ms of an H100. Where the analysis cleared it while
  // reading the stack (StackParams::clear_output_in_analysis), nothing is left.
  if (!p.clear_output_in_analysis) {
    const std::size_t count = static_cast<std::size_t>(p.slices) * p.rows * p.cols;
    if (dispatched.uniform_slices == 0) {
      if (p.out_fixed)
        PD_CUDA_CHECK(cudaMemsetAsync(p.out_fixed, 0, count * sizeof(unsigned long long), stream));
      else
        PD_CUDA_CHECK(cudaMemsetAsync(p.out, 0, count * sizeof(float), stream));
    } else if (dispatched.uniform_slices < p.slices) {
      const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
      const unsigned blocks_per_slice = static_cast<unsigned>((plane + 4 * 256 - 1) / (4 * 256));
      clear_scattered_slices_kernel<<<dim3(blocks_per_slice, static_cast<unsigned>(p.slices)), 256, 0, stream>>>(p, a);
      PD_CUDA_CHECK_LAUNCH("clear_scattered_slices_kernel");
    }
  }
  // With more than one bucket (or a bucket beside separable slices), the
  // buckets go round-robin over the side streams, largest radii first, and
  // run alongside each other and the separable passes, which stay on `stream`.
  int nonempty_buckets = 0;
  for (int bucket = 0; bucket < kBucketCount; ++bucket) nonempty_buckets += counts[bucket] > 0;
  const bool fan_out = nonempty_buckets > 1 || (nonempty_buckets == 1 && dispatched.uniform_slices > 0);
  const int side_streams = std::min(nonempty_buckets, BucketDispatch::kStreams);
  if (fan_out) buckets.fork(stream, side_streams);
  ConvolutionParams separable;
  if (dispatched.uniform_slices > 0)
    separable = launch_separable_uniform_slices(p, a, dispatched.uniform_slices, counts[kUniformMaxRadiusSlot],
                                                separable_scratch, stream);
  int launched = 0;
  for (int bucket = kBucketCount - 1; bucket >= 0; --bucket) {
    if (counts[bucket] == 0) continue;
    const cudaStream_t bucket_stream = fan_out ? buckets.stream(launched++) : stream;
    const int* tiles = a.bucket_tiles + static_cast<std::size_t>(bucket) * p.tile_count();
    if (bucket == kGeneralBucket)
      scatter_atomic_kernel<<<counts[bucket], dim3(kTileCols, kBlockRows), 0, bucket_stream>>>(p, tiles);
    else
      launch_radius(bucket, counts[bucket], tiles, bucket_stream);
    PD_CUDA_CHECK_LAUNCH("scatter bucket");
    dispatched.scatter_tiles += counts[bucket];
  }
  if (fan_out) buckets.join(stream, side_streams);
  // Groups: the uniform slices' column pass sums them, with the scattered
  // slices the buckets above wrote, into each group's plane.
  if (dispatched.uniform_slices > 0 && p.groups.count > 0 && !p.out_fixed) {
    launch_grouped_columns(separable, GroupedColumns{p.groups, a.uniform_index, p.out}, separable_scratch.rows.get(),
                           stream);
    dispatched.grouped = true;
  }
  return dispatched;
}

/// Prefer the largest shared-memory carveout for every tile kernel, so that
/// grids launched from the device get the same occupancy as host launches.
template <int R>
void prefer_shared_memory() {
  PD_CUDA_CHECK(cudaFuncSetAttribute(scatter_tiled_kernel<R>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  if constexpr (R > 0) prefer_shared_memory<R - 1>();
}

}  // namespace

BucketDispatch::BucketDispatch(int priority) {
  for (int i = 0; i < kStreams; ++i) {
    PD_CUDA_CHECK(cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, priority));
    PD_CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
  }
  PD_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
  PD_CUDA_CHECK(cudaMallocHost(&counts_, kBucketCountSlots * sizeof(int)));
}

BucketDispatch::~BucketDispatch() {
  // Destruction does not wait: the owner synchronises its stream after every
  // join, and a stream destroyed with work queued finishes it first.
  for (int i = 0; i < kStreams; ++i) {
    if (done_[i]) cudaEventDestroy(done_[i]);
    if (streams_[i]) cudaStreamDestroy(streams_[i]);
  }
  if (forked_) cudaEventDestroy(forked_);
  if (counts_) cudaFreeHost(counts_);
}

void BucketDispatch::queue_counts(const StackParams& p, const StackAnalysis& a, cudaStream_t stream) {
  launch_fixed_scale(p, a, stream);
  PD_CUDA_CHECK(cudaMemcpyAsync(counts_, a.bucket_count, kBucketCountSlots * sizeof(int), cudaMemcpyDeviceToHost,
                                stream));
  counts_queued_ = true;
}

const int* BucketDispatch::read_counts(const StackParams& p, const StackAnalysis& a, cudaStream_t stream) {
  if (!counts_queued_) queue_counts(p, a, stream);
  counts_queued_ = false;
  PD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return counts_;
}

void BucketDispatch::fork(cudaStream_t main, int used) {
  PD_CUDA_CHECK(cudaEventRecord(forked_, main));
  for (int i = 0; i < std::min(used, kStreams); ++i) PD_CUDA_CHECK(cudaStreamWaitEvent(streams_[i], forked_, 0));
}

void BucketDispatch::join(cudaStream_t main, int used) {
  for (int i = 0; i < std::min(used, kStreams); ++i) {
    PD_CUDA_CHECK(cudaEventRecord(done_[i], streams_[i]));
    PD_CUDA_CHECK(cudaStreamWaitEvent(main, done_[i], 0));
  }
}

void prepare_tile_kernels() {
  static PerDeviceSetting prepared;
  prepared.once([] { prefer_shared_memory<kMaxTileRadiusPx>(); });
}

DispatchCounts launch_scatter_tiled(const StackParams& p, const StackAnalysis& a, BucketLaunch launch,
                                    SeparableScratch& separable_scratch, BucketDispatch& buckets, cudaStream_t stream) {
  prepare_tile_kernels();
  if (launch == BucketLaunch::kFromDevice) {
    // The device-side dispatcher launches tile buckets only; uniform slices
    // left out of them would never be computed.
    if (p.separable_uniform_slices)
      throw InternalError("tile scatter: separable uniform slices need host-launched buckets");
    dispatch_buckets_kernel<<<1, 64, 0, stream>>>(p, a, pixel_count_of(p));
    PD_CUDA_CHECK_LAUNCH("dispatch_buckets_kernel");
    return {};
  }
  return launch_buckets_from_host(p, a, separable_scratch, buckets, stream,
                                  [&](int radius, int count, const int* tiles, cudaStream_t bucket_stream) {
                                    launch_bucket_from_host<kMaxTileRadiusPx>(radius, count, tiles, p, bucket_stream);
                                  });
}

void launch_scatter_tiled_fixed_radius(const StackParams& p, int radius, cudaStream_t stream) {
  prepare_tile_kernels();
  if (radius < 0 || radius > kMaxTileRadiusPx)
    throw InputError("tile scatter: radius " + std::to_string(radius) + " px outside 0.." +
                     std::to_string(kMaxTileRadiusPx));
  launch_fixed_radius<kMaxTileRadiusPx>(radius, p, stream);
  PD_CUDA_CHECK_LAUNCH("scatter_tiled_kernel");
}

void launch_fixed_scale(const StackParams& p, const StackAnalysis& a, cudaStream_t stream) {
  if (!p.out_fixed) return;  // float output needs no scale
  fixed_scale_kernel<<<1, 1, 0, stream>>>(a, pixel_count_of(p));
  PD_CUDA_CHECK_LAUNCH("fixed_scale_kernel");
}

namespace {

/// Strip height of the register-blocked kernel for radius R: 8 rows while
/// ky (8 × (R+1) registers) fits comfortably, 4 above.
constexpr int register_block_rows(int R) { return R <= 12 ? 8 : 4; }

template <int R>
constexpr int register_blocked_shared_bytes() {
  return static_cast<int>(sizeof(float)) *
         ((kTileRows + 2 * R) * (kTileCols + 2 * R) + register_block_rows(R) * (R + 1) * kTileCols);
}

template <int R>
void launch_register_blocked_radius(int radius, int count, const int* tiles, const StackParams& p,
                                    cudaStream_t stream) {
  if (radius == R) {
    constexpr int kT = register_block_rows(R);
    constexpr int kBytes = register_blocked_shared_bytes<R>();
    static PerDeviceSetting configured;
    configured.once([] {
      PD_CUDA_CHECK(cudaFuncSetAttribute(scatter_register_blocked_kernel<R, kT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    });
    scatter_register_blocked_kernel<R, kT><<<count, kTileCols, kBytes, stream>>>(p, tiles);
  } else if constexpr (R > 0) {
    launch_register_blocked_radius<R - 1>(radius, count, tiles, p, stream);
  }
}

}  // namespace

DispatchCounts launch_scatter_register_blocked(const StackParams& p, const StackAnalysis& a,
                                               SeparableScratch& separable_scratch, BucketDispatch& buckets,
                                               cudaStream_t stream) {
  return launch_buckets_from_host(p, a, separable_scratch, buckets, stream,
                                  [&](int radius, int count, const int* tiles, cudaStream_t bucket_stream) {
                                    launch_register_blocked_radius<kMaxTileRadiusPx>(radius, count, tiles, p,
                                                                                     bucket_stream);
                                  });
}

void launch_scatter_register_blocked_fixed_radius(const StackParams& p, int radius, cudaStream_t stream) {
  if (radius < 0 || radius > kMaxTileRadiusPx)
    throw InputError("register-blocked scatter: radius " + std::to_string(radius) + " px outside 0.." +
                     std::to_string(kMaxTileRadiusPx));
  launch_register_blocked_radius<kMaxTileRadiusPx>(radius, p.tile_count(), nullptr, p, stream);
  PD_CUDA_CHECK_LAUNCH("scatter_register_blocked_kernel");
}

DispatchCounts launch_scatter_tensor_core(const StackParams& p, const StackAnalysis& a, int min_radius,
                                          SeparableScratch& separable_scratch, BucketDispatch& buckets,
                                          cudaStream_t stream) {
  prepare_tile_kernels();
  return launch_buckets_from_host(p, a, separable_scratch, buckets, stream,
                                  [&](int radius, int count, const int* tiles, cudaStream_t bucket_stream) {
                                    if (radius >= std::max(1, min_radius))
                                      launch_scatter_tensor_core_tiles(radius, count, tiles, p, bucket_stream);
                                    else
                                      launch_bucket_from_host<kMaxTileRadiusPx>(radius, count, tiles, p,
                                                                                bucket_stream);
                                  });
}

void launch_scatter_tensor_core_fixed_radius(const StackParams& p, int radius, TensorCoreAccumulation accumulation,
                                             cudaStream_t stream) {
  launch_scatter_tensor_core_tiles(radius, p.tile_count(), nullptr, p, stream, accumulation);
}

void launch_scatter_atomic(const StackParams& p, cudaStream_t stream) {
  scatter_atomic_kernel<<<p.tile_count(), dim3(kTileCols, kBlockRows), 0, stream>>>(p, nullptr);
  PD_CUDA_CHECK_LAUNCH("scatter_atomic_kernel");
}

void launch_gather_exact(const StackParams& p, const StackAnalysis& a, cudaStream_t stream) {
  const dim3 block(32, 8);
  const dim3 grid((p.cols + 31) / 32, (p.rows + 7) / 8, p.slices);
  gather_exact_kernel<<<grid, block, 0, stream>>>(p, a.slice_radius);
  PD_CUDA_CHECK_LAUNCH("gather_exact_kernel");
}

void launch_group_sums(const StackParams& p, cudaStream_t stream) {
  const std::size_t plane = static_cast<std::size_t>(p.rows) * p.cols;
  constexpr int kMaxGridY = 65535;
  for (int first = 0; first < p.groups.count; first += kMaxGridY) {
    const unsigned n = static_cast<unsigned>(std::min(kMaxGridY, p.groups.count - first));
    group_sums_kernel<<<dim3(static_cast<unsigned>((plane + 255) / 256), n), 256, 0, stream>>>(p, first);
    PD_CUDA_CHECK_LAUNCH("group_sums_kernel");
  }
}

void launch_fixed_to_float(const StackParams& p, cudaStream_t stream) {
  const std::size_t count = static_cast<std::size_t>(p.slices) * p.rows * p.cols;
  const int blocks = static_cast<int>(std::min<std::size_t>((count + 255) / 256, 65535));
  fixed_to_float_kernel<<<blocks, 256, 0, stream>>>(p, count);
  PD_CUDA_CHECK_LAUNCH("fixed_to_float_kernel");
}

}  // namespace protondose::cuda
