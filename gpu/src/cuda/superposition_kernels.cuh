#pragma once
// Host launchers of the superposition kernels (CUB order: launcher → kernel →
// device helpers). Everything here works on device memory and one stream; the
// public, CUDA-free API is in protondose/gpu/superposition.h.
#include <cuda_runtime.h>

#include <cstddef>

#include "convolution_kernels.cuh"
#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/gpu/superposition.h"

namespace protondose::cuda {

/// Tile of the shared-memory scatter: a warp owns one tile row of kTileCols
/// pixels; a block of kBlockRows warps covers kTileRows rows (each thread
/// handles kTileRows / kBlockRows pixels of one column).
inline constexpr int kTileCols = 32;
inline constexpr int kTileRows = 16;
inline constexpr int kBlockRows = 8;
/// Buckets of tiles by radius: r = 0 … kMaxTileRadiusPx, and one "general"
/// bucket for tiles with larger radii (global-atomics scatter).
inline constexpr int kGeneralBucket = kMaxTileRadiusPx + 1;
inline constexpr int kBucketCount = kMaxTileRadiusPx + 2;
/// StackAnalysis::bucket_count has two more entries after the buckets: the
/// number of uniform-σ slices (StackParams::separable_uniform_slices) and
/// their largest radius, so that one read-back gives the host every launch size.
inline constexpr int kUniformSliceCountSlot = kBucketCount;
inline constexpr int kUniformMaxRadiusSlot = kBucketCount + 1;
inline constexpr int kBucketCountSlots = kBucketCount + 2;

/// Everything a kernel needs about one stack (plain struct, passed by value).
struct StackParams {
  int slices = 0, rows = 0, cols = 0;
  int tiles_x = 0, tiles_y = 0;   ///< tiles per slice along cols and rows
  float cutoff_sigmas = 3.0f;
  const float* image = nullptr;   ///< [slice][row][col]
  const float* sigma_x = nullptr;
  const float* sigma_y = nullptr;
  float* out = nullptr;           ///< float output (must be zeroed before a scatter)
  unsigned long long* out_fixed = nullptr;  ///< fixed-point accumulator (deterministic mode) or null
  const double* fixed_scale = nullptr;      ///< device scalar: fixed-point units per output unit
  /// Slices whose non-zero pixels share one σx and one σy leave the tile
  /// buckets and run as separable passes (host-launched buckets only).
  bool separable_uniform_slices = false;
  /// SuperpositionInput::slice_summary (null: every slice analysed).
  const unsigned long long* slice_summary = nullptr;
  /// SuperpositionInput::slice_box (null: none).
  const SliceBox* slice_box = nullptr;
  /// SuperpositionInput::groups (count 0: none).
  SuperpositionInput::SliceGroups groups;
  /// The analysis zeroes the output (out, or out_fixed) of every slice it
  /// reads while it reads the slice's pixels, and the host-launched dispatch
  /// clears nothing after the round trip (launch_buckets_from_host). Only
  /// where the analysis reads every slice (no slice_summary) and runs right
  /// before the dispatch (not queued ahead of it, when the output may still
  /// be another's to read): DeviceSuperposer::run. A stack of uniform slices
  /// then pays a clearing its column passes would not have needed.
  bool clear_output_in_analysis = false;
  __host__ __device__ int tile_count() const { return tiles_x * tiles_y * slices; }
};

/// The pixels of slice s that any kernel of the superposition reads: its
/// SuperpositionInput::slice_box, clipped to the slice (the whole slice
/// without boxes). The producer need not write the pixels outside it (the
/// engine's layer kernel leaves the rays outside its layer's spot fluence
/// unwritten); every load of a pixel outside it reads 0.
__device__ inline SliceBox read_box(const StackParams& p, int s) {
  return clipped_slice_box(p.slice_box, s, p.rows, p.cols);
}

/// Per-stack scratch, on the device. `analyse` fills it.
struct StackAnalysis {
  int* slice_radius = nullptr;    ///< [slice]: max radius of its non-zero pixels, -1 if all zero
  int* tile_radius = nullptr;     ///< [tile]: max radius of its non-zero pixels, -1 if all zero
  /// [slice][4]: bits of min σx, max σx, min σy, max σy over the slice's
  /// non-zero pixels (non-negative floats order as their bits).
  unsigned int* slice_sigma_bits = nullptr;
  int* uniform_slices = nullptr;  ///< [slice]: the uniform slices, bucket_count[kUniformSliceCountSlot] of them
  int* uniform_index = nullptr;   ///< [slice]: its place in uniform_slices, −1 if it is not there
  /// [slice]: the slices the analysis pass reads (all but those the stack's
  /// summary settles), read_slice_count of them, in no particular order.
  int* read_slices = nullptr;
  int* read_slice_count = nullptr;
  int* bucket_count = nullptr;    ///< [kBucketCountSlots] tiles per bucket, then the uniform slices' count and largest radius
  int* bucket_tiles = nullptr;    ///< [kBucketCount][tile_count]: tile indices of each bucket
  unsigned int* max_image_bits = nullptr;         ///< bits of the largest image value
  double* fixed_scale = nullptr;                  ///< deterministic-mode scale
  unsigned long long* first_invalid = nullptr;    ///< smallest index of an invalid pixel, or ~0
  /// The device-side dispatcher's first failed child launch (a cudaError_t),
  /// or 0: a child grid that never ran would otherwise leave its tiles out of
  /// the output without a word.
  int* device_launch_error = nullptr;
};

/// Bytes of device scratch `analysis_layout` needs for a stack.
std::size_t analysis_bytes(const StackParams& p);
/// Carves a StackAnalysis out of `scratch` (analysis_bytes(p) bytes, 16-byte aligned).
StackAnalysis analysis_layout(const StackParams& p, void* scratch);

/// Resets the scratch, then one pass over the stack (per-tile and per-slice
/// radii and σ ranges, invalid pixels flagged, the largest value kept for the
/// fixed-point scale) and one over the tiles: non-zero tiles appended to their
/// radius bucket — except, with p.separable_uniform_slices, the tiles of
/// uniform-σ slices, which are listed as slices instead.
void launch_analyse(const StackParams& p, const StackAnalysis& a, cudaStream_t stream);
/// Device memory of the separable passes over uniform slices (grow-only): the
/// row pass's intermediate, and per slice its radii and 1D weights.
struct SeparableScratch {
  DeviceBuffer<float> rows;
  DeviceBuffer<float> weights;
  DeviceBuffer<int> radii;
};
/// What the host-launched dispatch keeps from one stack to the next: the
/// pinned buffer the bucket counts come back to, and the side streams the
/// buckets spread over. A bucket is one grid of one radius; the engine's depth
/// stacks (and the benchmark's 200 × 192² one) spread over ~17 radii with
/// fewer tiles each than the GPU holds at once, and in one stream each bucket
/// waited for the previous one's last blocks. The side streams are forked
/// from the caller's stream once the output is cleared and joined before
/// anything reads the output; the bucket kernels only add into it (float or
/// fixed-point atomics), so their order does not matter, and the
/// deterministic mode's integer sums stay bitwise the same. One per
/// superposer, created on its device.
class BucketDispatch {
 public:
  static constexpr int kStreams = 4;
  /// On the current device; its streams at `priority` (cudaStreamCreateWithPriority).
  explicit BucketDispatch(int priority = 0);
  ~BucketDispatch();
  BucketDispatch(const BucketDispatch&) = delete;
  BucketDispatch& operator=(const BucketDispatch&) = delete;

  /// Side streams 0 … used − 1 (at most kStreams) wait for the work queued on `main` so far.
  void fork(cudaStream_t main, int used);
  /// `main` waits for the work queued on side streams 0 … used − 1 so far.
  void join(cudaStream_t main, int used);
  cudaStream_t stream(int i) const { return streams_[i % kStreams]; }
  /// Pinned host memory for StackAnalysis::bucket_count (kBucketCountSlots ints).
  int* counts() const { return counts_; }
  /// Queues, on `stream`, the deterministic mode's fixed-point scale and the
  /// read-back of the bucket counts into counts(), without waiting: the next
  /// read_counts on that stream then only waits for them
  /// (DeviceSuperposer::queue_analysis).
  void queue_counts(const StackParams& p, const StackAnalysis& a, cudaStream_t stream);
  /// The bucket counts of the analysis `a` of `p` in counts(), once `stream`
  /// reached them: queued by queue_counts, else queued now.
  const int* read_counts(const StackParams& p, const StackAnalysis& a, cudaStream_t stream);
  /// Forgets a queue_counts that no dispatch will read (a superposition of
  /// other arrays came first).
  void drop_queued_counts() { counts_queued_ = false; }

 private:
  cudaStream_t streams_[kStreams] = {};
  cudaEvent_t forked_ = nullptr;
  cudaEvent_t done_[kStreams] = {};
  int* counts_ = nullptr;
  bool counts_queued_ = false;
};

/// Sets the tile kernels' shared-memory carveout on the current device (once
/// per device; it also loads them, which lazy module loading would otherwise
/// do at their first launch).
void prepare_tile_kernels();
/// Who launches the per-radius grids of the tile scatter.
enum class BucketLaunch {
  kFromDevice,  ///< a one-block dispatcher kernel (dynamic parallelism): no host round trip
  kFromHost,    ///< the host reads the bucket sizes back (one round trip per stack)
};
/// What the host-launched paths read back: how the stack was split.
struct DispatchCounts {
  int uniform_slices = 0;  ///< slices run as separable passes
  int scatter_tiles = 0;   ///< non-zero tiles run by the scatter (all buckets)
  /// p.groups were summed (by the separable column pass); else the caller
  /// sums them from p.out (launch_group_sums).
  bool grouped = false;
};
/// The shared-memory tile scatter over every non-empty bucket (general bucket:
/// global-atomics scatter), and the separable passes over the uniform slices
/// (row-pass intermediate in `separable_scratch`, grown as needed; only with
/// p.separable_uniform_slices, which needs BucketLaunch::kFromHost). Also
/// writes the fixed-point scale (deterministic mode). Returns the split
/// (zeros when launched from the device: the host never sees the counts).
DispatchCounts launch_scatter_tiled(const StackParams& p, const StackAnalysis& a, BucketLaunch launch,
                                    SeparableScratch& separable_scratch, BucketDispatch& buckets, cudaStream_t stream);
/// The tile scatter with one compile-time radius for every tile of the stack
/// (the paper's experiment: r_max fixed per launch). radius must be ≥ every
/// tile radius, 0 … kMaxTileRadiusPx.
void launch_scatter_tiled_fixed_radius(const StackParams& p, int radius, cudaStream_t stream);
/// The register-blocked scatter over every non-empty bucket, launched from the
/// host (general bucket: global-atomics scatter), and the separable passes over
/// the uniform slices as above. Also writes the fixed-point scale (deterministic mode).
DispatchCounts launch_scatter_register_blocked(const StackParams& p, const StackAnalysis& a,
                                               SeparableScratch& separable_scratch, BucketDispatch& buckets,
                                               cudaStream_t stream);
/// The register-blocked kernel with one radius for every tile of the stack.
void launch_scatter_register_blocked_fixed_radius(const StackParams& p, int radius, cudaStream_t stream);
/// The tensor-core scatter (scatter_tensor_core.cu) over every non-empty
/// bucket, launched from the host: bucket radii ≥ min_radius (and ≤
/// kMaxTileRadiusPx) on the tensor cores, smaller ones on the tile scatter,
/// the general bucket on the global-atomics scatter; the separable passes over
/// the uniform slices as above. Also writes the fixed-point scale (deterministic mode).
DispatchCounts launch_scatter_tensor_core(const StackParams& p, const StackAnalysis& a, int min_radius,
                                          SeparableScratch& separable_scratch, BucketDispatch& buckets,
                                          cudaStream_t stream);
/// How the tensor-core kernel sums a tile's products: fresh accumulators per
/// source row added in float (the dispatcher's; ≤ 3·10⁻⁶ of max(O)), or one
/// chain of mma per output block (benchmark only: up to 1.5·10⁻⁵ at r 32,
/// over the 10⁻⁵ limit; docs/ks-core.md).
enum class TensorCoreAccumulation { kFreshRowSums, kChained };
/// The tensor-core kernel over `count` tiles of radius `radius` (1 … kMaxTileRadiusPx; tiles null: every tile).
void launch_scatter_tensor_core_tiles(int radius, int count, const int* tiles, const StackParams& p,
                                      cudaStream_t stream,
                                      TensorCoreAccumulation accumulation = TensorCoreAccumulation::kFreshRowSums);
/// The tensor-core kernel with one radius (1 … kMaxTileRadiusPx) for every tile of the stack.
void launch_scatter_tensor_core_fixed_radius(const StackParams& p, int radius, TensorCoreAccumulation accumulation,
                                             cudaStream_t stream);
/// Sets the dispatcher's tensor-core kernels' shared-memory limits on the
/// current device (once per device; the benchmark's chained variant is
/// configured at its first launch).
void prepare_tensor_core_kernels();
/// Writes the fixed-point scale for paths without the dispatcher; nothing
/// without a fixed-point output (p.out_fixed null).
void launch_fixed_scale(const StackParams& p, const StackAnalysis& a, cudaStream_t stream);
/// Global-atomics scatter, one thread per input pixel, any radius.
void launch_scatter_atomic(const StackParams& p, cudaStream_t stream);
/// Exact gather, one thread per output pixel, erf per neighbour; radius per slice.
void launch_gather_exact(const StackParams& p, const StackAnalysis& a, cudaStream_t stream);
/// Deterministic mode: converts the fixed-point accumulator into p.out.
void launch_fixed_to_float(const StackParams& p, cudaStream_t stream);
/// p.groups from the whole output p.out: each group's plane += its member
/// slices in order (the paths whose column pass did not sum them).
void launch_group_sums(const StackParams& p, cudaStream_t stream);

}  // namespace protondose::cuda
