// GPU executor: the beam_kernels.h functions as CUDA kernels over device
// arrays. The CT, the traces, the stacks, the BEV dose and the dose volumes
// stay on the device; per stage only a few numbers come back (the crop, the
// energy put into the stack, the overshoot, the dose check). The executor's
// work runs in a stream of its own; the superposers run in theirs, so a call
// that hands the stack over synchronises the executor's stream first. The halo
// runs on a host thread of its own, in a third stream, alongside the core
// superposition.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>

#include "../beam_executor.h"
#include "protondose/core/error.h"
#include "protondose/core/host_timeline.h"
#include "protondose/core/task_thread.h"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/gpu/cuda/stream_priority.cuh"
#include "protondose/gpu/device_superposition.h"

namespace protondose::engine {
namespace {

using cuda::DeviceBuffer;
using kernels::BevGeometry;

constexpr int kThreads = 256;

unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

/// Whether p may be read and written as float4.
bool is_16_byte_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

/// Host to device in `stream`. From pageable memory the call returns once the
/// source is staged, so `h` may go out of scope right after; from pinned
/// memory (PinnedStaging) it returns at once, and `h` must live until the
/// stream has run the copy.
template <class T>
void upload(DeviceBuffer<T>& d, const T* h, std::size_t n, cudaStream_t stream) {
  d.reserve(std::max<std::size_t>(n, 1));
  if (n) PD_CUDA_CHECK(cudaMemcpyAsync(d.get(), h, n * sizeof(T), cudaMemcpyHostToDevice, stream));
}

template <class T>
void zero(DeviceBuffer<T>& d, std::size_t n, cudaStream_t stream) {
  d.reserve(std::max<std::size_t>(n, 1));
  if (n) PD_CUDA_CHECK(cudaMemsetAsync(d.get(), 0, n * sizeof(T), stream));
}

/// Pinned host memory that one stage packs its uploads into, so that they
/// run asynchronously: a cudaMemcpyAsync from pageable memory returns only
/// once the driver has staged the data, and for the water cube's 21,780 spots
/// and 20 layers' tables that kept the host ~0.45 ms (H100 host) while the GPU
/// waited for the spreading kernel. Grow-only; a stage starts with begin(),
/// after the copies of the previous stage have completed.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging() {
    if (host_ != nullptr) cudaFreeHost(host_);
  }
  /// Room for `bytes` (each take() rounded up to 16 bytes); the earlier
  /// stage's copies out of it must be complete.
  void begin(std::size_t bytes) {
    if (bytes > capacity_) {
      if (host_ != nullptr) PD_CUDA_CHECK(cudaFreeHost(host_));
      host_ = nullptr;
      capacity_ = 0;
      PD_CUDA_CHECK(cudaMallocHost(&host_, bytes));
      capacity_ = bytes;
    }
    used_ = 0;
  }
  /// n values' room, for the host to fill before it uploads them.
  template <class T>
  T* take(std::size_t n) {
    const std::size_t bytes = rounded(n * sizeof(T));
    if (used_ + bytes > capacity_) throw InternalError("PinnedStaging: a stage took more than it reserved");
    T* p = reinterpret_cast<T*>(static_cast<unsigned char*>(host_) + used_);
    used_ += bytes;
    return p;
  }
  /// Bytes that take<T>(n) uses.
  template <class T>
  static std::size_t bytes_for(std::size_t n) {
    return rounded(n * sizeof(T));
  }
  /// Where a pointer take() gave lands in `mirror`, a device buffer of at
  /// least the begin() bytes that upload_all copies the stage into.
  template <class T>
  T* in_mirror(char* mirror, const T* taken) const {
    return reinterpret_cast<T*>(mirror + (reinterpret_cast<const char*>(taken) - static_cast<const char*>(host_)));
  }
  /// Everything taken since begin(), in one copy into `mirror` (in_mirror).
  void upload_all(char* mirror, cudaStream_t stream) const {
    if (used_ > 0) PD_CUDA_CHECK(cudaMemcpyAsync(mirror, host_, used_, cudaMemcpyHostToDevice, stream));
  }

 private:
  static std::size_t rounded(std::size_t bytes) { return (bytes + 15) / 16 * 16; }
  void* host_ = nullptr;
  std::size_t capacity_ = 0, used_ = 0;
};

// --- kernels ---------------------------------------------------------------

/// One thread per (slice, ray): kernels::trace_sample. The thread's (col,
/// row, slice) by multiplies and shifts (VoxelIndexer over cols × rows ×
/// slices), not by four 64-bit divisions: the water cube's trace 168 → 154
/// µs, 135 → 125 M instructions (H100, ncu). (The same in the accumulation
/// of the stack per depth, since moved into the superposer, and in
/// halo_bin_kernel, both bound by memory, gained nothing.)
__global__ void trace_sample_kernel(kernels::TraceInput in, kernels::TraceOutput out, kernels::VoxelIndexer samples) {
  const std::size_t p = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (p >= in.grid.plane() * static_cast<std::size_t>(in.grid.slices)) return;
  int col, row, k;
  samples.split(p, &col, &row, &k);
  kernels::trace_sample(in, out, col, row, k);
}

/// Block-wide reduction over a block of kThreads threads with `op` (thread
/// 0's return value; `identity` elsewhere). Each instantiation has its own
/// shared partials; the trailing barrier lets a kernel reduce twice.
template <class T, class Op>
__device__ T block_reduce(T v, T identity, Op op) {
  __shared__ T partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T total = identity;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) total = op(total, partial[w]);
  __syncthreads();
  return total;
}

/// The (segment, ray) of thread p of the trace's segment kernels, and the
/// ray's step length; false past the last segment.
struct SegmentRay {
  int segment;
  std::size_t ray;
  double step_mm;
};
__device__ bool segment_ray(const BevGeometry& g, std::size_t p, SegmentRay* s) {
  const std::size_t plane = g.plane();
  if (p >= plane * static_cast<std::size_t>(kernels::trace_segments(g.slices))) return false;
  s->segment = static_cast<int>(p / plane);
  s->ray = p - static_cast<std::size_t>(s->segment) * plane;
  const int col = static_cast<int>(s->ray % static_cast<unsigned>(g.cols));
  const int row = static_cast<int>(s->ray / static_cast<unsigned>(g.cols));
  s->step_mm = kernels::trace_step_mm(g, col, row);
  return true;
}

/// One thread per (segment, ray): the segment's water-equivalent thickness
/// (kernels::trace_segment_wet) into wet_mm [segment][ray], and the least
/// entry and first-material slices of the block into *entry_min and
/// *first_min (an atomic per block: per thread, the 474 k segments of the
/// water cube's rays that hold material would queue on one address).
__global__ void trace_segment_kernel(BevGeometry g, kernels::TraceOutput out, double* wet_mm, int* entry_min,
                                     int* first_min) {
  const std::size_t p = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  int entry = -1, first = -1;
  SegmentRay s;
  if (segment_ray(g, p, &s))  // every thread reduces below
    wet_mm[p] = kernels::trace_segment_wet(g, out, s.ray, s.segment, s.step_mm, &entry, &first);
  const auto least = [](int a, int b) { return a < b ? a : b; };
  entry = block_reduce(entry < 0 ? INT_MAX : entry, INT_MAX, least);
  first = block_reduce(first < 0 ? INT_MAX : first, INT_MAX, least);
  if (threadIdx.x == 0) {
    if (entry != INT_MAX) atomicMin(entry_min, entry);
    if (first != INT_MAX) atomicMin(first_min, first);
  }
}

/// One thread per (segment, ray): the WEPL of the segment's slices
/// (kernels::trace_segment_wepl) after the earlier segments' thicknesses,
/// added in order as kernels::trace_wepl does; the first segment's thread
/// stores the ray's step length.
__global__ void trace_wepl_kernel(BevGeometry g, kernels::TraceOutput out, const double* wet_mm) {
  SegmentRay s;
  if (!segment_ray(g, blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x, &s)) return;
  if (s.segment == 0) out.step_mm[s.ray] = static_cast<float>(s.step_mm);
  double wepl_before = 0.0;
  for (int c = 0; c < s.segment; ++c) wepl_before += wet_mm[static_cast<std::size_t>(c) * g.plane() + s.ray];
  kernels::trace_segment_wepl(g, out, s.ray, s.segment, s.step_mm, wepl_before);
}

// The most per warp first, then one atomic per warp instead of one per ray
// on the layer's counter (25.9 → 24.7 µs on the water cube, H100).
__global__ void cutoff_kernel(const float* wepl_far, BevGeometry g, const int* first_min, const double* cutoffs,
                              int* most) {
  const std::size_t ray = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const int layer = blockIdx.y;
  const int first = *first_min;  // the trace's (trace_segment_kernel); INT_MAX: no material
  if (first == INT_MAX) return;  // the same for every thread
  const int n = ray < g.plane() ? kernels::slices_before_cutoff(wepl_far, g.plane(), ray, first, g.slices, cutoffs[layer])
                                : 0;  // ≥ 0 like every count: adds nothing to the maximum
  const int warp_most = __reduce_max_sync(0xffffffffu, n);
  if (threadIdx.x % 32 == 0) atomicMax(&most[layer], warp_most);
}

/// Block-wide sum of a double (thread 0's return value).
__device__ double block_sum(double v) {
  return block_reduce(v, 0.0, [](double a, double b) { return a + b; });
}

/// Block-wide maximum of a non-negative float (thread 0's return value).
__device__ float block_max(float v) {
  return block_reduce(v, 0.0f, [](float a, float b) { return fmaxf(a, b); });
}

/// The stack's slice summary (SuperpositionInput::slice_summary), written
/// from the pixels as they are stored: the lanes of a warp with pixels of
/// the same slice agree on one σ key or mark the slice for the analysis to
/// read; then a few atomics per warp and slice.
struct SliceSummaryWriter {
  unsigned long long* summary;  ///< [kSliceSummaryFields][slices]
  std::size_t slices;           ///< the stack's
  std::size_t stack_offset;     ///< the layer's first stack slice

  /// Valid as the superposer's analysis means it.
  __device__ static bool valid(float v) { return v >= 0.0f && v <= 3.0e38f; }
  __device__ static unsigned long long sigma_key(float sigma_x_px, float sigma_y_px) {
    return static_cast<unsigned long long>(__float_as_uint(sigma_x_px)) << 32 | __float_as_uint(sigma_y_px);
  }

  /// Called by every lane of the warp, all at the same slice k (the layer
  /// kernel's, kernels::layer_ray's observer; a pixel the ray did not compute
  /// is a zero): votes over the whole warp. The general form below, for lanes
  /// that may be at different slices, took 87 instructions per slice step,
  /// 16 % of the layer kernel's stall samples (ncu, water cube, H100).
  /// Index: the layer kernel's (32-bit where every stack index fits, and
  /// then the summary's kSliceSummaryFields × slices words do too): the
  /// three atomics' addresses took ~12 of the step's instructions in 64-bit.
  template <class Index = std::size_t>
  __device__ void in_step(int k, float image, float sigma_x_px, float sigma_y_px) const {
    constexpr unsigned kWarp = 0xffffffffu;
    const bool ok = valid(image) && valid(sigma_x_px) && valid(sigma_y_px);
    const bool counted = ok && image > 0.0f;
    const unsigned counted_lanes = __ballot_sync(kWarp, counted);
    const bool any_invalid = __any_sync(kWarp, !ok);
    if (counted_lanes == 0u && !any_invalid) return;  // only zeros (warp-uniform)
    const unsigned long long key = sigma_key(sigma_x_px, sigma_y_px);
    const unsigned long long reference_key = __shfl_sync(kWarp, key, counted_lanes ? __ffs(counted_lanes) - 1 : 0);
    const bool all_same = __all_sync(kWarp, !counted || key == reference_key);
    const unsigned image_max = __reduce_max_sync(kWarp, counted ? __float_as_uint(image) : 0u);
    if (threadIdx.x % 32 != 0) return;
    add<Index>(k, any_invalid || !all_same, counted_lanes != 0u, reference_key, image_max);
  }

  /// Called by the lanes present, at any slices (the halo binning's pixels):
  /// grouped by slice first (in step is the common case, tested first: a
  /// match over the warp costs more than a vote).
  __device__ void operator()(int k, float image, float sigma_x_px, float sigma_y_px) const {
    const bool ok = valid(image) && valid(sigma_x_px) && valid(sigma_y_px);
    const bool counted = ok && image > 0.0f;
    const unsigned long long key = sigma_key(sigma_x_px, sigma_y_px);
    const unsigned active = __activemask();
    const int first = __ffs(active) - 1;
    unsigned group = __ballot_sync(active, k == __shfl_sync(active, k, first));
    if (group != active) group = __match_any_sync(active, k);
    const unsigned counted_lanes = __ballot_sync(group, counted);
    const bool any_invalid = __ballot_sync(group, !ok) != 0u;
    const int reference_lane = counted_lanes ? __ffs(counted_lanes) - 1 : __ffs(group) - 1;
    const unsigned long long reference_key = __shfl_sync(group, key, reference_lane);
    int all_same = 0;
    __match_all_sync(group, counted ? key : reference_key, &all_same);
    const unsigned image_max = __reduce_max_sync(group, counted ? __float_as_uint(image) : 0u);
    if (static_cast<int>(threadIdx.x % 32) != __ffs(group) - 1) return;
    add(k, any_invalid || !all_same, counted_lanes != 0u, reference_key, image_max);
  }

 private:
  /// One lane's atomics for its group's pixels of slice k.
  template <class Index = std::size_t>
  __device__ void add(int k, bool read_slice, bool any_counted, unsigned long long key, unsigned image_max) const {
    const Index slot = static_cast<Index>(stack_offset) + static_cast<Index>(k);
    const Index field = static_cast<Index>(slices);
    unsigned long long* min_key = summary + (static_cast<Index>(kSummaryMinSigmaKey) * field + slot);
    unsigned long long* max_key = summary + (static_cast<Index>(kSummaryMaxSigmaKey) * field + slot);
    if (read_slice) {  // the analysis reads the slice (and reports the invalid pixel)
      atomicMin(min_key, 0ull);
      atomicMax(max_key, ~0ull);
      return;
    }
    if (!any_counted) return;  // only zeros
    atomicMin(min_key, key);
    atomicMax(max_key, key);
    atomicMax(summary + (static_cast<Index>(kSummaryMaxImage) * field + slot), static_cast<unsigned long long>(image_max));
  }
};

/// kernels::layer_ray's observer in the layer kernel: every lane of the warp
/// calls it at every slice (SliceSummaryWriter::in_step).
template <class Index>
struct LayerSliceSummary {
  SliceSummaryWriter writer;
  __device__ void operator()(int k, float image, float sigma_x_px, float sigma_y_px) const {
    writer.in_step<Index>(k, image, sigma_x_px, sigma_y_px);
  }
};

/// Slice s of an empty summary of `slices` slices.
__device__ inline void reset_slice_summary(unsigned long long* summary, std::size_t slices, std::size_t s) {
  summary[kSummaryMinSigmaKey * slices + s] = ~0ull;
  summary[kSummaryMaxSigmaKey * slices + s] = 0ull;
  summary[kSummaryMaxImage * slices + s] = 0ull;
}

/// An empty summary (one thread per slice).
__global__ void reset_slice_summary_kernel(unsigned long long* summary, std::size_t slices) {
  const std::size_t s = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (s < slices) reset_slice_summary(summary, slices, s);
}

/// The layer kernel's halo store (kernels::layer_ray's HaloStore): the halo
/// shares of each group of kColumnBin neighbouring rays of a row, and the
/// shares times their variances, summed over the group's lanes of the warp
/// and stored by the group's first lane (kernels::
/// halo_bin_pixel_from_column_bins reads them). Per pixel the layer kernel
/// stored two floats for the halo, 0.76 GB for the water cube's 95 M pixels,
/// which the halo binning read back; with the 8 mm halo grid over 1 mm rays
/// the sums are 0.19 GB.
/// The sums are double, as the per-pixel binning's were: where every pixel
/// of a slice has the same halo variance (water, a parallel beam), the
/// coarse pixel's mean variance is then that variance exactly and the coarse
/// slice stays uniform, so the halo superposition keeps its separable passes
/// (float sums made the mean differ in its last bits from pixel to pixel,
/// and the halo stack went to the scatter: +0.3 ms on the water cube, H200).
/// Every lane of the warp calls it at every slice of the layer (layer_ray's
/// contract), so the shuffles see the whole warp. Deterministic: a fixed
/// tree of adds.
template <int kColumnBin>
struct ColumnBinnedHaloStore {
  static_assert(kColumnBin == 1 || kColumnBin == 2 || kColumnBin == 4 || kColumnBin == 8);
  double* share_sum;      ///< [stack slice][row][column bin]; null without the halo
  double* weighted_sum;   ///< Σ share·variance (Gy·mm²)
  std::size_t bin_plane;    ///< rows × column bins
  std::size_t first_index;  ///< the group's bin at the layer's first stack slice
  bool stores;              ///< the group's first lane, on a row of the grid

  template <class Index>
  __device__ void operator()(const kernels::LayerStackArgs& /*s*/, int k, Index /*stack_index*/, bool /*on_grid*/,
                             float share, float variance_mm2) const {
    if (!share_sum) return;
    // As kernels::halo_bin_pixel: a share ≤ 0 adds nothing (a NaN does).
    double v = share <= 0.0f ? 0.0 : static_cast<double>(share);
    double w = v * variance_mm2;  // exact: a product of two floats
#pragma unroll
    for (int offset = kColumnBin / 2; offset > 0; offset /= 2) {
      v += __shfl_down_sync(0xffffffffu, v, offset);
      w += __shfl_down_sync(0xffffffffu, w, offset);
    }
    if (stores) store<Index>(k, v, w);
  }

  /// What operator() stores when no lane of the warp has a share (no shuffles).
  template <class Index>
  __device__ void store_zero(int k) const {
    if (share_sum && stores) store<Index>(k, 0.0, 0.0);
  }

 private:
  /// Index: the layer kernel's (32-bit where every stack index fits; the
  /// bins are fewer than the stack's pixels). In 64-bit, the bin's index took
  /// 11 of the step's ~408 instructions (SASS, water cube, H100).
  template <class Index>
  __device__ void store(int k, double share, double weighted) const {
    const Index i = static_cast<Index>(first_index) + static_cast<Index>(k) * static_cast<Index>(bin_plane);
    share_sum[i] = share;
    weighted_sum[i] = weighted;
  }
};

/// The layer kernel's rays: the threads of a block in groups of
/// `column_bin` lanes, each group a run of columns of one row
/// (ColumnBinnedHaloStore), the groups in row-major order; lanes past a
/// row's last column are off the grid. column_bin = 1: ray = thread.
/// (Blocks of 32 columns × 8 rows instead, so that a block would hold only
/// margin rays or only field rays, made the water cube's layer kernel 1.45 →
/// 2.06 ms with as many instructions, ncu, H100, 2026-11-27.)
struct LayerRayLayout {
  int column_bin;    ///< 1, 2, 4 or 8 (the kernel's kColumnBin)
  int bins_per_row;  ///< ceil(cols / column_bin)
  int rows;
  std::size_t threads() const {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(bins_per_row) * column_bin;
  }
};
/// Where a layer's spot fluence may be non-zero: the union of its spots'
/// boxes (SpotBox), gathered by spot_boxes_kernel's atomics.
/// Stored so that a zeroed buffer is the empty box: INT_MAX − begin and end,
/// both raised by atomicMax.
struct FluenceBoxSum {
  int col_begin_complement, col_end, row_begin_complement, row_end;

  /// Adds the box [x_lo, x_hi] × [y_lo, y_hi] (inclusive, ≥ 0).
  __device__ void add(int x_lo, int x_hi, int y_lo, int y_hi) {
    atomicMax(&col_begin_complement, INT_MAX - x_lo);
    atomicMax(&col_end, x_hi + 1);
    atomicMax(&row_begin_complement, INT_MAX - y_lo);
    atomicMax(&row_end, y_hi + 1);
  }
  /// As the superposer takes it (begin > end where no spot added a box).
  __device__ SliceBox box() const {
    SliceBox b;
    b.col_begin = INT_MAX - col_begin_complement;
    b.col_end = col_end;
    b.row_begin = INT_MAX - row_begin_complement;
    b.row_end = row_end;
    return b;
  }
};

/// The layer stage's resets in one launch (each launch is ~6–15 µs of the
/// host's time with the GPU idle before the layer kernel): an empty slice
/// summary (one thread per stack slice) and the empty fluence box of each
/// layer of the group.
__global__ void reset_layer_stage_kernel(unsigned long long* summary, std::size_t slices, FluenceBoxSum* boxes,
                                         std::size_t layers) {
  const std::size_t s = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (s < slices) reset_slice_summary(summary, slices, s);
  if (s < layers) boxes[s] = FluenceBoxSum{};  // zero: the empty box
}

/// layer_ray's tables in the layer kernel's shared memory
/// (kernels::AnyTableSpace says why it matters): loads through these
/// pointers are shared-memory loads. Only where they are there
/// (layer_kernel<…, kSharedTables = true>).
struct SharedTableSpace {
  template <class T>
  __device__ static const T* of(const T* table) {
    __builtin_assume(__isShared(table));
    return table;
  }
};

/// The most dynamic shared memory a layer kernel's block takes for its
/// layer's tables (kernels::LayerSharedTables): four blocks of an SM then
/// stay within its 228 KB. The water cube's layers take 8–23 KB.
constexpr std::size_t kMaxLayerTableSharedBytes = 52 * 1024;
/// Dynamic shared memory a kernel may take without opting in.
constexpr std::size_t kDefaultDynamicSharedBytes = 48 * 1024;

/// One thread per (ray, layer): kernels::layer_ray in single precision (its
/// CIDD and energy sum stay double): within 3.4e-6 of D_max of the double dose
/// on the engine's test cases (tests/engine/float_layer_images_test.cpp).
// 4 blocks of 256 threads per SM (≤ 64 registers): the per-ray loop is
// latency-bound (global loads, dependent double arithmetic), so warps in
// flight count. It fits without spilling since the CIDD walk takes its curve
// from the shared tables at every face (kernels::CiddWalk): 1,606 → 1,529 µs
// against 3 blocks (882 → 917 M warp instructions, the rest rematerialised;
// ncu, water cube, H100, 2026-11-26). Earlier, 4 blocks spilled 20–92 bytes
// and lost or gained within 3 %.
// Index: std::size_t, or unsigned where every trace and stack index fits
// (layer_images' check; kernels::layer_ray says what it saves).
// kSharedTables: the layer's tables fit the block's shared memory
// (kMaxLayerTableSharedBytes) and are read from there (SharedTableSpace);
// else from global memory.
template <class Index, int kColumnBin, bool kSharedTables>
__global__ void __launch_bounds__(kThreads, 4) layer_kernel(kernels::LayerStackArgs s, LayerRayLayout layout,
                             double* halo_share_sum, double* halo_weighted_sum,
                             const kernels::LayerTables<float>* layers, double* energy_sum,
                             int* overshoot_max, unsigned* max_halo_variance_bits, unsigned long long* slice_summary,
                             std::size_t stack_slices, const FluenceBoxSum* fluence_boxes, SliceBox* slice_boxes) {
  // The layers of one block of rays are neighbours in the launch order
  // (blockIdx.x is the layer): they run together and read the same trace
  // samples, which come from DRAM once and from L2 for the other layers.
  // (Taking the rays with protons first, so that they fill whole warps —
  // 24 of 32 lanes are active in the warps that compute pixels of the water
  // cube — cut the warp instructions by 12–18 % but made the kernel slower,
  // 1.59 → 1.71–1.76 ms, with more DRAM traffic and longer memory stalls:
  // docs/benchmarks-engine.md, "the layer kernel's CIDD nodes", ncu, H100.)
  const std::size_t thread = blockIdx.y * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t group = thread / kColumnBin;
  const int lane_in_group = static_cast<int>(thread % kColumnBin);
  const int row = static_cast<int>(group / static_cast<unsigned>(layout.bins_per_row));
  const int bin = static_cast<int>(group % static_cast<unsigned>(layout.bins_per_row));
  const int col = bin * kColumnBin + lane_in_group;
  const SliceBox fluence_box = fluence_boxes[blockIdx.x].box();
  // The layer's tables in shared memory: read from global memory, each of
  // their fields was reloaded after every store to the stack (the compiler
  // cannot rule out that a float store changes them), ~17 dependent loads per
  // slice step in the SASS; a shared copy cannot alias the stack.
  __shared__ kernels::LayerTables<float> L;
  static_assert(sizeof L % sizeof(unsigned) == 0 && std::is_trivially_copyable_v<kernels::LayerTables<float>>);
  for (unsigned w = threadIdx.x; w < sizeof L / sizeof(unsigned); w += blockDim.x)
    reinterpret_cast<unsigned*>(&L)[w] = reinterpret_cast<const unsigned*>(layers + blockIdx.x)[w];
  // The step's constants in float, beside them (kernels::LayerRayConstants).
  __shared__ kernels::LayerRayConstants<float> constants;
  if (threadIdx.x == 0) constants = kernels::layer_ray_constants<float>(s.grid, layers[blockIdx.x]);
  // And the tables themselves (kernels::LayerSharedTables), where the launch
  // gave the room: the curve's nodes (16-byte aligned in global memory too:
  // copied as double2), the WEPL tables and the in-air σ (packed at any
  // float offset: copied as floats), L's pointers turned to the copies.
  extern __shared__ float4 layer_tables_smem[];
  if constexpr (kSharedTables) {
    const kernels::LayerTables<float>& G = layers[blockIdx.x];
    const kernels::LayerSharedTables at(G.curve_nodes, G.wepl_nodes, G.halo_weight != nullptr, G.slices);
    char* base = reinterpret_cast<char*>(layer_tables_smem);
    const int curve_words =
        (G.curve_nodes + kernels::kCurvePadNodes) * static_cast<int>(sizeof(kernels::CurveNode) / sizeof(double2));
    for (int w = threadIdx.x; w < curve_words; w += blockDim.x)
      reinterpret_cast<double2*>(base + at.curve)[w] = reinterpret_cast<const double2*>(G.curve)[w];
    const auto copy = [&](std::size_t offset, const float* from, int count) {
      for (int f = threadIdx.x; f < count; f += blockDim.x) reinterpret_cast<float*>(base + offset)[f] = from[f];
    };
    copy(at.energy, G.energy_mev, G.wepl_nodes);
    copy(at.scattering, G.scattering_factor, G.wepl_nodes);
    if (G.halo_weight) {
      copy(at.halo_weight, G.halo_weight, G.wepl_nodes);
      copy(at.halo_sigma, G.halo_sigma_mm, G.wepl_nodes);
    }
    copy(at.air_x, G.air_sigma_x_mm, G.slices);
    copy(at.air_y, G.air_sigma_y_mm, G.slices);
    __syncthreads();  // L's copy done: its pointers are turned below
    if (threadIdx.x == 0) {
      L.curve = reinterpret_cast<const kernels::CurveNode*>(base + at.curve);
      L.energy_mev = reinterpret_cast<const float*>(base + at.energy);
      L.scattering_factor = reinterpret_cast<const float*>(base + at.scattering);
      if (G.halo_weight) {
        L.halo_weight = reinterpret_cast<const float*>(base + at.halo_weight);
        L.halo_sigma_mm = reinterpret_cast<const float*>(base + at.halo_sigma);
      }
      L.air_sigma_x_mm = reinterpret_cast<const float*>(base + at.air_x);
      L.air_sigma_y_mm = reinterpret_cast<const float*>(base + at.air_y);
    }
  }
  __syncthreads();
  // Each slice of the layer is read by the superposer only inside its
  // fluence's box (its SliceBox): the rays outside it write nothing.
  if (blockIdx.y == 0)
    for (int k = threadIdx.x; k < L.slices; k += blockDim.x) slice_boxes[L.stack_offset + k] = fluence_box;
  int overshoot = INT_MIN;
  float halo_variance_max = 0;
  // Every thread of a warp runs the ray loop, those off the grid too (the
  // halo store's shuffles need the whole warp); off the grid it stores nothing.
  const std::size_t bin_plane = static_cast<std::size_t>(layout.rows) * static_cast<std::size_t>(layout.bins_per_row);
  const ColumnBinnedHaloStore<kColumnBin> halo{halo_share_sum, halo_weighted_sum, bin_plane,
                                                L.stack_offset * bin_plane + (row < layout.rows ? group : 0),
                                                lane_in_group == 0 && row < layout.rows};
  // A warp of rays without protons (the grid's margin, which the widest
  // kernels reach) only writes zeros: a store per array and slice, without
  // the slice step's arithmetic and the halo store's shuffles. Warp-uniform,
  // so the shuffles of the other warps are not affected.
  const bool on_grid = row < layout.rows && col < s.grid.cols;
  const bool has_protons = on_grid && L.fluence[static_cast<std::size_t>(row) * s.grid.cols + col] > 0;
  double energy = 0;
  if (__any_sync(0xffffffffu, has_protons)) {
    using TableSpace = std::conditional_t<kSharedTables, SharedTableSpace, kernels::AnyTableSpace>;
    energy = kernels::layer_ray<float, LayerSliceSummary<Index>, Index, ColumnBinnedHaloStore<kColumnBin>, TableSpace>(
        s, L, constants, col, row, &overshoot, &halo_variance_max,
        LayerSliceSummary<Index>{SliceSummaryWriter{slice_summary, stack_slices, L.stack_offset}}, halo);
  } else {
    // Outside the layer's fluence box nothing is written at all: the
    // superposer reads no pixel outside a slice's box (SliceBox), the halo's
    // binning no column group that does not reach into it. The zeros there
    // were 43 % of the water cube's stack, and writing them took 0.23 ms of
    // the kernel's 1.25 (ncu, H100).
    const bool row_in_box = on_grid && row >= fluence_box.row_begin && row < fluence_box.row_end;
    const bool in_box = row_in_box && col >= fluence_box.col_begin && col < fluence_box.col_end;
    const int group_col = bin * kColumnBin;
    const bool group_in_box =
        row_in_box && group_col < fluence_box.col_end && group_col + kColumnBin > fluence_box.col_begin;
    const Index plane = static_cast<Index>(s.grid.plane());
    const Index ray = in_box ? static_cast<Index>(row) * static_cast<Index>(s.grid.cols) + static_cast<Index>(col) : 0;
    Index i = static_cast<Index>(L.stack_offset) * plane + ray;
    if (__any_sync(0xffffffffu, in_box || (group_in_box && halo.share_sum)))
      for (int k = 0; k < L.slices; ++k, i += plane) {
        if (in_box) {
          s.image[i] = 0.0f;
          s.sigma_x_px[i] = 0.0f;
          s.sigma_y_px[i] = 0.0f;
        }
        if (group_in_box) halo.template store_zero<Index>(k);
      }
  }
  if (overshoot != INT_MIN) atomicMax(overshoot_max, overshoot);
  // Largest halo variance under a non-zero halo share (sizes the coarse grid's pad).
  if (halo_variance_max > 0) atomicMax(max_halo_variance_bits, __float_as_uint(halo_variance_max));  // ≥ 0: bits order as values
  // The energy summed over the warp, one atomic per warp: summed over the
  // block, every warp waited at its barrier for the block's slowest (the
  // warps without protons for those with: 13 % of the stall samples, ncu),
  // though the kernel's time did not measurably change (1,253 → 1,247 µs, H100).
  double warp_energy = energy;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) warp_energy += __shfl_down_sync(0xffffffffu, warp_energy, offset);
  if (threadIdx.x % 32 == 0 && warp_energy != 0) atomicAdd(energy_sum, warp_energy);
}

/// A spot of the beam at the isocentre plane (mm): independent of the grid,
/// so that the beam's spots stay in device memory from one CT to the next.
struct DeviceSpot {
  double x_iso_mm, y_iso_mm, protons;
  int layer;  ///< the beam's layer (HostLayerTables::beam_layer)
};

/// A layer's spreading σ (isocentre plane, mm) in pixels of grid g, x then
/// y: what the spreading kernels read (spread_beam_fluence, and
/// layer_images where nothing was spread before it).
inline void spread_sigma_px(const BevGeometry& g, double sigma_x_iso_mm, double sigma_y_iso_mm, double* px) {
  px[0] = sigma_x_iso_mm / g.pitch_x_mm;
  px[1] = sigma_y_iso_mm / g.pitch_y_mm;
}

/// The ray grid's lateral layout: a spot's position in pixel units, as
/// spot_fluence.cpp finds it (the same double operations, so the same bits).
struct SpotPixels {
  double x0_mm, y0_mm, pitch_x_mm, pitch_y_mm;
  int cols, rows;
  explicit SpotPixels(const BevGeometry& g)
      : x0_mm(g.x0_mm), y0_mm(g.y0_mm), pitch_x_mm(g.pitch_x_mm), pitch_y_mm(g.pitch_y_mm), cols(g.cols), rows(g.rows) {}
  __device__ double col_px(const DeviceSpot& sp) const { return (sp.x_iso_mm - x0_mm) / pitch_x_mm; }
  __device__ double row_px(const DeviceSpot& sp) const { return (sp.y_iso_mm - y0_mm) / pitch_y_mm; }
};

/// A spot's box of rays, [x_lo, x_hi] × [y_lo, y_hi] (kernels::spot_axis_range
/// with its layer's σ); false where it spreads nothing (an empty box, or no
/// protons). The spots are those of a group of layers whose first is the
/// beam's layer `first_layer`; σ is indexed within the group.
struct SpotBox {
  int layer;  ///< within the group
  int x_lo, x_hi, y_lo, y_hi;
  double col_px, row_px;  ///< the spot's centre (px)
  double sx, sy;  ///< the layer's spreading σ (px)
  __device__ bool find(const DeviceSpot& sp, int first_layer, const double* sigma_px, double cutoff_sigmas,
                       const SpotPixels& grid) {
    layer = sp.layer - first_layer;
    sx = sigma_px[2 * layer];
    sy = sigma_px[2 * layer + 1];
    col_px = grid.col_px(sp);
    row_px = grid.row_px(sp);
    kernels::spot_axis_range(col_px, sx, cutoff_sigmas, grid.cols, &x_lo, &x_hi);
    kernels::spot_axis_range(row_px, sy, cutoff_sigmas, grid.rows, &y_lo, &y_hi);
    return x_hi >= x_lo && y_hi >= y_lo && sp.protons > 0;
  }
};

/// One block per spot: its protons spread over the box of rays it reaches,
/// with the weights and the product order of spot_fluence.cpp. The spot's
/// column and row weights (two double erf each) are computed once into shared
/// memory, not per cell: per cell they were four erf for one product (0.33 ms
/// for the water cube's 21,780 spots on an H100, ncu).
/// The spots are those of the group's layers (SpotBox); fluence planes are
/// indexed within the group.
__global__ void spread_kernel(const DeviceSpot* spots, int first_layer, const double* sigma_px /* [layer][2] */,
                              double cutoff_sigmas, SpotPixels grid, double* fluence) {
  extern __shared__ double axis_weights[];  // [box width] column weights, then [box height] protons × row weights
  const DeviceSpot sp = spots[blockIdx.x];
  SpotBox b;
  if (!b.find(sp, first_layer, sigma_px, cutoff_sigmas, grid)) return;
  const int w = b.x_hi - b.x_lo + 1, h = b.y_hi - b.y_lo + 1;
  double* wx = axis_weights;
  double* py = axis_weights + w;
  for (int i = threadIdx.x; i < w; i += blockDim.x) wx[i] = kernels::spot_axis_weight(b.x_lo + i, b.col_px, b.sx);
  for (int i = threadIdx.x; i < h; i += blockDim.x)
    py[i] = sp.protons * kernels::spot_axis_weight(b.y_lo + i, b.row_px, b.sy);
  __syncthreads();
  double* plane = fluence + static_cast<std::size_t>(b.layer) * static_cast<std::size_t>(grid.cols) * grid.rows;
  for (int cell = threadIdx.x; cell < w * h; cell += blockDim.x) {
    const int r = cell / w, c = cell % w;
    atomicAdd(&plane[static_cast<std::size_t>(b.y_lo + r) * grid.cols + b.x_lo + c], py[r] * wx[c]);
  }
}

/// Each layer's FluenceBoxSum, from its spots' boxes (SpotBox), one thread
/// per spot: the lanes of a warp with the same layer (the spots come layer
/// by layer) reduce their boxes, and one lane adds them. In the spreading,
/// an atomic per spot and field (1,089 on each of the water cube's
/// addresses) took it from 71 to 136–162 µs (H100); here ~30 per address.
__global__ void spot_boxes_kernel(const DeviceSpot* spots, unsigned count, int first_layer, const double* sigma_px,
                                  double cutoff_sigmas, SpotPixels grid, FluenceBoxSum* boxes) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  SpotBox b;
  const bool spreads = i < count && b.find(spots[i], first_layer, sigma_px, cutoff_sigmas, grid);
  const int layer = spreads ? b.layer : -1;
  const unsigned same = __match_any_sync(0xffffffffu, layer);
  const int x_lo = __reduce_min_sync(same, spreads ? b.x_lo : INT_MAX);
  const int x_hi = __reduce_max_sync(same, spreads ? b.x_hi : -1);
  const int y_lo = __reduce_min_sync(same, spreads ? b.y_lo : INT_MAX);
  const int y_hi = __reduce_max_sync(same, spreads ? b.y_hi : -1);
  if (spreads && static_cast<int>(threadIdx.x % 32) == __ffs(same) - 1) boxes[layer].add(x_lo, x_hi, y_lo, y_hi);
}

/// One thread per coarse pixel of the halo stack, from the layer kernel's
/// column sums (ColumnBinnedHaloStore). The coarse grid's pad (as wide as
/// the widest halo kernel: 87 % of the water cube's coarse pixels) holds
/// zeros, written without the block sums; the pixel's place comes from
/// multiplies and shifts, not 64-bit divisions.
/// It also writes the coarse stack's slice summary (SliceSummaryWriter, as
/// the layer kernel does for the core's stack), so that the halo's
/// superposition need not read the stack to find its uniform slices (its
/// analysis: 56 µs on the water cube, H200); and, from the fine stack's
/// boxes, the coarse slices' (kernels::coarse_slice_box).
__global__ void halo_bin_kernel(kernels::HaloBinning h, BevGeometry hg, kernels::VoxelIndexer pixels,
                                const int* depth_slice, std::size_t stack_slices, const double* share_sum,
                                const double* weighted_sum, float* image, float* sx, float* sy,
                                unsigned long long* slice_summary, const SliceBox* fine_boxes,
                                SliceBox* coarse_boxes) {
  const std::size_t hplane = hg.plane();
  const std::size_t p = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (p >= hplane * stack_slices) return;
  if (p < stack_slices) coarse_boxes[p] = kernels::coarse_slice_box(fine_boxes[p], h);  // hplane ≥ 1
  int coarse_col, coarse_row, st;
  pixels.split(p, &coarse_col, &coarse_row, &st);
  const int r0 = (coarse_row - h.pad_rows) * h.factor, c0 = (coarse_col - h.pad_cols) * h.factor;
  float value = 0.0f, sigma_x = 0.0f, sigma_y = 0.0f;
  // Within the block, only the column sums that reach into the stack
  // slice's box are read: the layer kernel writes no other.
  if (r0 >= 0 && c0 >= 0 && r0 < h.fine_rows && c0 < h.fine_cols) {  // else the pad: zeros
    const double d = hg.depth_mm(depth_slice[st]);
    const double px = hg.pitch_x_mm * hg.magnification_x(d), py = hg.pitch_y_mm * hg.magnification_y(d);
    const std::size_t bin_plane = static_cast<std::size_t>((h.fine_cols + h.column_bin - 1) / h.column_bin) *
                                  static_cast<std::size_t>(h.fine_rows);
    kernels::halo_bin_pixel_from_column_bins(h, share_sum + st * bin_plane, weighted_sum + st * bin_plane, coarse_row,
                                             coarse_col, px, py, &value, &sigma_x, &sigma_y, &fine_boxes[st]);
  }
  image[p] = value;
  sx[p] = sigma_x;
  sy[p] = sigma_y;
  SliceSummaryWriter{slice_summary, stack_slices, 0}(st, value, sigma_x, sigma_y);
}

/// Adds the BEV dose at each output voxel (kernels::resample_voxel, blended in
/// float as in resample_finish_kernel: kernels::sample_bev_index says why).
__global__ void resample_kernel(BevGeometry g, const float* bev, kernels::Affine3 beam_from_index,
                                kernels::VoxelIndexer voxels, std::size_t n, float* dose) {
  const std::size_t v = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (v >= n) return;
  int i, j, k;
  voxels.split(v, &i, &j, &k);
  kernels::resample_voxel<float>(g, bev, beam_from_index, i, j, k, &dose[v]);
}

/// Where the plan's check goes (finish_plan_kernel, or the last beam's
/// resample_finish_kernel); first_bad null: no plan check in that launch.
struct PlanCheck {
  double scale;
  unsigned long long* first_bad;
  unsigned* max_bits;
};

/// One voxel of the plan dose: scaled (RBE or 1), its first bad voxel
/// flagged; returns the value the maximum takes (0 for a bad one).
__device__ inline float finish_plan_voxel(float& x, std::size_t v, const PlanCheck& c) {
  if (c.scale != 1.0) x = static_cast<float>(x * c.scale);
  if (!isfinite(x) || x < 0.0f) {
    atomicMin(c.first_bad, static_cast<unsigned long long>(v));
    return 0.0f;
  }
  return x;
}

/// The halo's last coarse dose, if any.
struct HaloDose {
  BevGeometry grid;
  const float* bev;  ///< null: none
};

/// Output voxels per thread of resample_finish_kernel: a run of consecutive
/// voxels of a row shares one point found in double (kernels::BevIndexLine),
/// one float4 of each array and one share of the block reductions.
constexpr int kResampleRun = 4;

/// Loads the run of `count` values from p + v0: one float4 where `vector`
/// (a whole run, 16-byte aligned), else one by one.
__device__ inline void load_run(const float* p, std::size_t v0, int count, bool vector, float (&out)[kResampleRun]) {
  if (vector) {
    const float4 q = *reinterpret_cast<const float4*>(p + v0);
    out[0] = q.x, out[1] = q.y, out[2] = q.z, out[3] = q.w;
    return;
  }
  for (int u = 0; u < kResampleRun; ++u) out[u] = u < count ? p[v0 + u] : 0.0f;
}
__device__ inline void store_run(float* p, std::size_t v0, int count, bool vector, const float (&in)[kResampleRun]) {
  if (vector) {
    *reinterpret_cast<float4*>(p + v0) = make_float4(in[0], in[1], in[2], in[3]);
    return;
  }
  for (int u = 0; u < count; ++u) p[v0 + u] = in[u];
}

/// As kernels::resample_point: a sample of 0 adds nothing (not even to −0).
__device__ inline void add_sample(float& x, float sample) {
  if (sample != 0.0f) x += sample;
}

/// One pass over the output voxels, kResampleRun per thread: the beam dose is
/// what earlier halo runs left in `beam` (beam_holds_dose; else 0), plus the
/// halo's last coarse dose, plus the core's BEV dose, added in that order as
/// kernels::resample_voxel adds them (in float: kernels::sample_bev_index);
/// then the beam's check (first bad voxel), Σ dose·density, and the beam added
/// to the plan (written as it is for the plan's first beam, `plan_holds_dose`
/// false: the plan needs no clearing pass, 64 MB at 1 mm of the water cube). Three passes over the dose grid before (resample the halo,
/// resample the core, check): 0.55 ms of an H100 for the water cube.
/// With `plan_check` (the plan's last beam), each voxel of the plan is then
/// also scaled and checked as finish_plan_kernel does.
/// A run inside one row of the dose grid takes its BEV indices from one
/// double point and float steps (kernels::BevIndexLine, within a few float
/// ulps of the position found per voxel in double); a run across a row's end
/// (a row length not a multiple of kResampleRun), or the grid's last, finds
/// each voxel's in double. `vector_io`: beam, plan and density are 16-byte
/// aligned (each whole run then one float4 per array).
/// At most 64 registers (4 blocks per SM, no spill): a first version at 72
/// registers (3 blocks), with two double divisions per axis and line, was no
/// faster than one voxel per thread (261 against 258 µs, water cube, H100;
/// this one 201 µs: docs/benchmarks-engine.md).
__global__ void __launch_bounds__(kThreads, 4)
    resample_finish_kernel(BevGeometry g, const float* bev, HaloDose halo, kernels::Affine3 beam_from_index,
                           kernels::VoxelIndexer voxels, std::size_t n, bool beam_holds_dose, float* beam,
                           const float* density, float* plan, bool plan_holds_dose, bool vector_io, unsigned long long* first_bad,
                           double* dose_times_density, PlanCheck plan_check) {
  const std::size_t v0 = (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) * kResampleRun;
  double s = 0;
  float good = 0.0f;
  if (v0 < n) {
    const int count = static_cast<int>(n - v0 < kResampleRun ? n - v0 : kResampleRun);
    const bool vector = vector_io && count == kResampleRun;
    // The voxels' density and plan dose are loaded first, so that their
    // latency passes under the samples: loaded after the store to beam
    // (which the compiler could not move them past), they drew 27 % of the
    // kernel's stall samples (ncu, water cube, H100).
    float voxel_density[kResampleRun], plan_dose[kResampleRun], x[kResampleRun];
    load_run(density, v0, count, vector, voxel_density);
    if (plan_holds_dose) {
      load_run(plan, v0, count, vector, plan_dose);
    } else {
      for (float& p : plan_dose) p = 0.0f;
    }
    if (beam_holds_dose) {
      load_run(beam, v0, count, vector, x);
    } else {
      for (float& xu : x) xu = 0.0f;
    }
    int i, j, k;
    voxels.split(v0, &i, &j, &k);
    if (count == kResampleRun && i + kResampleRun <= voxels.nx) {
      double point[3];  // the first voxel's beam-frame point, for both samples
      beam_from_index.apply(i, j, k, point);
      const double step[3] = {beam_from_index.a[0][0], beam_from_index.a[1][0], beam_from_index.a[2][0]};
      if (halo.bev) {
        const kernels::BevIndexLine line(halo.grid, point, step);
        for (int u = 0; u < kResampleRun; ++u) add_sample(x[u], line.sample(halo.grid, halo.bev, u));
      }
      const kernels::BevIndexLine line(g, point, step);
      for (int u = 0; u < kResampleRun; ++u) add_sample(x[u], line.sample(g, bev, u));
    } else {
      for (int u = 0; u < count; ++u) {
        voxels.split(v0 + u, &i, &j, &k);
        double point[3];
        beam_from_index.apply(i, j, k, point);
        if (halo.bev) kernels::resample_point<float>(halo.grid, halo.bev, point, &x[u]);
        kernels::resample_point<float>(g, bev, point, &x[u]);
      }
    }
    for (int u = 0; u < count; ++u) {
      if (!isfinite(x[u]) || x[u] < 0.0f) atomicMin(first_bad, static_cast<unsigned long long>(v0 + u));
      else s += static_cast<double>(x[u]) * voxel_density[u];
      plan_dose[u] += x[u];
      if (plan_check.first_bad) good = fmaxf(good, finish_plan_voxel(plan_dose[u], v0 + u, plan_check));
    }
    store_run(beam, v0, count, vector, x);
    store_run(plan, v0, count, vector, plan_dose);
  }
  const double block = block_sum(s);
  if (threadIdx.x == 0 && block != 0) atomicAdd(dose_times_density, block);
  if (plan_check.first_bad) {  // the same for the whole launch
    const float m = block_max(good);
    if (threadIdx.x == 0 && m > 0.0f) atomicMax(plan_check.max_bits, __float_as_uint(m));  // ≥ 0: bits order as values
  }
}

/// Scales the plan dose, finds its maximum and its first bad voxel. The
/// maximum is reduced per block first: an atomicMax per positive voxel
/// serialised on one address (0.34 ms for a 256³ dose on an H100, ncu).
__global__ void finish_plan_kernel(float* plan, std::size_t n, PlanCheck c) {
  const std::size_t v = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  float good = 0.0f;
  if (v < n) {
    float x = plan[v];
    good = finish_plan_voxel(x, v, c);
    if (c.scale != 1.0) plan[v] = x;
  }
  const float block = block_max(good);
  if (threadIdx.x == 0 && block > 0.0f) atomicMax(c.max_bits, __float_as_uint(block));  // ≥ 0: bits order as values
}

// --- the executor ----------------------------------------------------------

SuperpositionOptions with_high_priority_streams(SuperpositionOptions options) {
  options.high_priority_streams = true;
  return options;
}

class GpuBeamExecutor final : public BeamExecutor {
 public:
  GpuBeamExecutor(SuperpositionMethod method, const SuperpositionOptions& options)
      : device_(options.gpu_device), superposer_(method, options),
        halo_superposer_(method, with_high_priority_streams(options)) {
    PD_CUDA_CHECK(cudaSetDevice(device_));
    // A stream of its own, not the legacy default stream: engines of several
    // workers on one GPU (robust, batch) then neither serialise their kernels
    // nor wait for each other's work at every stage's synchronisation.
    // The halo's streams (its binning's and its superposer's) at the
    // greatest priority: with the core's analysis queued behind the layer
    // kernel, the core's passes take the GPU first, and the halo's small
    // kernels queued behind them and ran after them as the stage's tail
    // (its bucket counts back 450 µs after its analysis was launched, water
    // cube, H100). Neither superposition waits for the other.
    // Beside stream_, at the least priority, beside_stream_ clears the BEV
    // while stream_ runs the layer kernel: stream_ one step above, so that
    // the layer kernel's blocks go first.
    using cuda::StreamPriority;
    PD_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                               cuda::stream_priority(StreamPriority::kAboveLeast)));
    PD_CUDA_CHECK(cudaStreamCreateWithPriority(&beside_stream_, cudaStreamNonBlocking,
                                               cuda::stream_priority(StreamPriority::kLeast)));
    PD_CUDA_CHECK(cudaStreamCreateWithPriority(&halo_stream_, cudaStreamNonBlocking,
                                               cuda::stream_priority(StreamPriority::kGreatest)));
    void* pinned = nullptr;
    PD_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(PinnedSmall)));
    pinned_ = new (pinned) PinnedSmall{};
    PD_CUDA_CHECK(cudaEventCreateWithFlags(&trace_read_back_, cudaEventDisableTiming));
    PD_CUDA_CHECK(cudaEventCreateWithFlags(&layer_sums_back_, cudaEventDisableTiming));
    PD_CUDA_CHECK(cudaEventCreateWithFlags(&layer_images_done_, cudaEventDisableTiming));
    PD_CUDA_CHECK(cudaEventCreateWithFlags(&stream_fork_, cudaEventDisableTiming));
    PD_CUDA_CHECK(cudaEventCreateWithFlags(&bev_cleared_event_, cudaEventDisableTiming));
  }
  ~GpuBeamExecutor() override {
    wait_staged_layers();  // before what the staging threads write into goes
    release_halo_thread();
    if (halo_run_.valid()) halo_run_.wait();  // its result, if unawaited, is dropped with halo_result_
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (halo_stream_ != nullptr) cudaStreamDestroy(halo_stream_);
    if (beside_stream_ != nullptr) cudaStreamDestroy(beside_stream_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);  // trivially destructible
    if (trace_read_back_ != nullptr) cudaEventDestroy(trace_read_back_);
    if (layer_sums_back_ != nullptr) cudaEventDestroy(layer_sums_back_);
    if (layer_images_done_ != nullptr) cudaEventDestroy(layer_images_done_);
    for (cudaEvent_t e : {stream_fork_, bev_cleared_event_})
      if (e != nullptr) cudaEventDestroy(e);
    for (cudaEvent_t e : device_mark_events_) cudaEventDestroy(e);
    for (int b = 0; b < 2; ++b) {
      if (download_staging_[b] != nullptr) cudaFreeHost(download_staging_[b]);
      if (download_staged_[b] != nullptr) cudaEventDestroy(download_staged_[b]);
    }
  }
  bool on_device() const override { return true; }

  void set_patient(const PatientVolumes& v) override {
    PD_CUDA_CHECK(cudaSetDevice(device_));
    patient_ = &v;
    // The last few prepared CTs stay on the device (a robust run alternates
    // between its range errors' CTs); the least recently used goes first.
    for (std::size_t i = 0; i < patients_.size(); ++i)
      if (v.id != 0 && patients_[i]->id == v.id) {
        std::rotate(patients_.begin(), patients_.begin() + static_cast<std::ptrdiff_t>(i),
                    patients_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        current_ = patients_.front().get();
        return;
      }
    if (patients_.size() >= kCachedPatients) patients_.pop_back();
    auto p = std::make_unique<PatientBuffers>();
    p->id = v.id;
    // Pageable copies: through the pinned ring (a host copy of one chunk
    // while the other crosses PCIe) the 1 mm plan03 CT's 2 × 110 MB took
    // longer (dose ready 63–76 ms against 51–66, H100 host).
    upload(p->rsp, v.rsp.data.data(), v.rsp.data.size(), stream_);
    upload(p->density, v.density.data.data(), v.density.data.size(), stream_);
    if (!v.out_rsp.data.empty()) {  // else the output grid is the CT grid: rsp and density serve
      upload(p->out_rsp, v.out_rsp.data.data(), v.out_rsp.data.size(), stream_);
      upload(p->out_density, v.out_density.data.data(), v.out_density.data.size(), stream_);
    }
    upload(p->inverse_length, v.inverse_length_table.data(), v.inverse_length_table.size(), stream_);
    patients_.insert(patients_.begin(), std::move(p));
    current_ = patients_.front().get();
  }

  void begin_plan(const Grid3& og) override {
    og_ = og;
    finished_plan_.reset();
    {
      std::lock_guard<std::mutex> lock(device_marks_mutex_);
      device_marks_.clear();  // a computation that ended in an error left its own
    }
    // No clearing: the first finish_beam writes the plan dose (ensure_plan_written otherwise).
    plan_.reserve(std::max<std::size_t>(og.voxel_count(), 1));
    plan_holds_dose_ = false;
    plan_host_ = {};  // made once the GPU has its longest kernel (start_plan_host_volume)
  }

  /// The host volume the plan dose will land in is made (allocated, every
  /// page touched) on a thread of its own while the GPU computes: at 1 mm it
  /// is ~100 MB, whose page faults took ~50 ms on the H100 host when they
  /// came after the computation, inside the download. It starts after the
  /// first layer kernel's launch, not with the plan: its page faults slowed
  /// the host's own set-up of the beam, packing and launches with the GPU
  /// idle (water cube, H200 host), and the layer kernel leaves the host ~2 ms
  /// with nothing to do.
  void start_plan_host_volume() {
    if (plan_host_.valid()) return;
    plan_host_ = plan_host_thread_.run([og = og_] { return Volume<float>(og, 0.0f); });
  }
  /// No clearing: finish_beam writes every voxel of the beam dose (and a
  /// halo run of an earlier layer group clears it before it adds to it).
  void begin_beam() override {
    beam_.reserve(std::max<std::size_t>(og_.voxel_count(), 1));
    beam_holds_dose_ = false;
    pending_halo_.reset();
  }

  void synchronize() override { PD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void start_trace(const BevGeometry& g, const kernels::Affine3& ct_index_from_beam,
                   const std::vector<double>& cutoffs) override {
    // A computation that failed between its start_trace and trace_summary
    // (its in-air tables, its staging or spreading threw) left the trace's
    // read-back queued into upload_staging_, which this trace reuses: the
    // copy must land before the host writes the cut-offs there.
    if (trace_back_ != nullptr) {
      PD_CUDA_CHECK(cudaStreamSynchronize(stream_));
      trace_back_ = nullptr;
    }
    beam_staged_ = false;  // stage_beam_layers follows, for the beam this trace is of
    fluence_spread_ = false;  // and spread_beam_fluence
    const std::size_t plane = g.plane(), pixels = plane * static_cast<std::size_t>(g.slices);
    trace_pixels_ = pixels;
    trace_rsp_.reserve(pixels);
    trace_density_.reserve(pixels);
    wepl_far_.reserve(pixels);
    rho_over_x_.reserve(pixels);
    step_.reserve(plane);
    kernels::TraceInput in{};
    in.grid = g;
    in.ct_index_from_beam = ct_index_from_beam;
    in.rsp = current_->rsp.get();
    in.density_g_cm3 = current_->density.get();
    for (int a = 0; a < 3; ++a) in.ct_size[a] = patient_->rsp.grid.size[a];
    in.inverse_length_table = current_->inverse_length.get();
    in.inverse_length_nodes = static_cast<int>(patient_->inverse_length_table.size());
    in.inv_density_step = 1.0 / patient_->density_step_g_cm3;
    kernels::TraceOutput out{trace_rsp_.get(), trace_density_.get(), wepl_far_.get(), rho_over_x_.get(), step_.get()};
    const std::size_t layers = cutoffs.size();
    ints_.reserve(2 + layers);  // entry, first material, then the cut-offs' slices
    device_mark("trace starts", stream_);
    trace_sample_kernel<<<blocks_for(pixels), kThreads, 0, stream_>>>(in, out,
                                                                     kernels::VoxelIndexer(g.cols, g.rows, g.slices));
    PD_CUDA_CHECK_LAUNCH("trace_sample_kernel");
    // After the first kernel's launch, which does not read them: the GPU
    // starts the trace one call (~12 µs of this host's time) sooner.
    upload_seed(ints_.get(), pinned_->trace_seeds, sizeof pinned_->trace_seeds);
    const std::size_t segments = plane * static_cast<std::size_t>(kernels::trace_segments(g.slices));
    segment_wet_.reserve(segments);
    trace_segment_kernel<<<blocks_for(segments), kThreads, 0, stream_>>>(g, out, segment_wet_.get(), ints_.get(),
                                                                         ints_.get() + 1);
    PD_CUDA_CHECK_LAUNCH("trace_segment_kernel");
    trace_wepl_kernel<<<blocks_for(segments), kThreads, 0, stream_>>>(g, out, segment_wet_.get());
    PD_CUDA_CHECK_LAUNCH("trace_wepl_kernel");
    // The cut-offs' slices, from the first material slice the trace found,
    // read back with it: through the layer images' pinned staging (free: the
    // last layer_images' copies are done, and the next begins it anew after
    // trace_summary drained the stream).
    upload_staging_.begin(PinnedStaging::bytes_for<double>(layers) + PinnedStaging::bytes_for<int>(2 + layers));
    double* pinned_cutoffs = upload_staging_.take<double>(layers);
    trace_back_ = upload_staging_.take<int>(2 + layers);  // entry, first material, then the cut-offs'
    trace_cutoffs_ = layers;
    std::copy(cutoffs.begin(), cutoffs.end(), pinned_cutoffs);
    upload(doubles_, pinned_cutoffs, layers, stream_);
    if (layers > 0) {
      PD_CUDA_CHECK(cudaMemsetAsync(ints_.get() + 2, 0, layers * sizeof(int), stream_));
      cutoff_kernel<<<dim3(blocks_for(plane), static_cast<unsigned>(layers)), kThreads, 0, stream_>>>(
          wepl_far_.get(), g, ints_.get() + 1, doubles_.get(), ints_.get() + 2);
      PD_CUDA_CHECK_LAUNCH("cutoff_kernel");
    }
    PD_CUDA_CHECK(cudaMemcpyAsync(trace_back_, ints_.get(), (2 + layers) * sizeof(int), cudaMemcpyDeviceToHost, stream_));
    PD_CUDA_CHECK(cudaEventRecord(trace_read_back_, stream_));
    device_mark("trace read back", stream_);
  }

  void spread_beam_fluence(const BevGeometry& full, const std::vector<double>& spread_sigma_iso_mm,
                           double cutoff_sigmas) override {
    if (!beam_staged_) throw InternalError("spread_beam_fluence: the beam's layers were not staged after its trace");
    const std::size_t layers = spread_sigma_iso_mm.size() / 2;
    if (spread_sigma_iso_mm.size() % 2 != 0 || layers != beam_packs_.front()->layers.size())
      throw InternalError("spread_beam_fluence: " + std::to_string(spread_sigma_iso_mm.size()) +
                          " spread σ values for a beam of " + std::to_string(beam_packs_.front()->layers.size()) +
                          " layers (two per layer)");
    upload_staged_layers();  // a beam not kept in device memory: its packing (polled) and upload
    // Its own pinned block: the σ's copy may still be queued when
    // layer_images begins upload_staging_ anew (trace_summary waits for the
    // trace's read-back only).
    spread_staging_.begin(PinnedStaging::bytes_for<double>(std::max<std::size_t>(2 * layers, 1)));
    double* sigma_px = spread_staging_.take<double>(2 * layers);
    for (std::size_t l = 0; l < layers; ++l)
      spread_sigma_px(full, spread_sigma_iso_mm[2 * l], spread_sigma_iso_mm[2 * l + 1], sigma_px + 2 * l);
    upload(spread_sigma_px_, sigma_px, 2 * layers, stream_);
    fluence_boxes_.reserve(std::max<std::size_t>(layers, 1));
    if (layers > 0) {
      reset_layer_stage_kernel<<<blocks_for(layers), kThreads, 0, stream_>>>(nullptr, 0, fluence_boxes_.get(), layers);
      PD_CUDA_CHECK_LAUNCH("reset_layer_stage_kernel");
    }
    spread_spots(full, layers, 0, cutoff_sigmas, sigma_px, spread_sigma_px_.get());
    device_mark("fluence spread", stream_);
    spread_grid_ = full;
    spread_sigma_iso_mm_ = spread_sigma_iso_mm;
    spread_cutoff_sigmas_ = cutoff_sigmas;
    fluence_spread_ = true;
  }

  TraceSummary trace_summary() override {
    if (trace_back_ == nullptr) throw InternalError("trace_summary: no start_trace before it");
    PD_CUDA_CHECK(cudaEventSynchronize(trace_read_back_));  // not the spreading queued after it
    TraceSummary s;
    s.entry_slice = trace_back_[0] == INT_MAX ? -1 : trace_back_[0];
    s.first_material_slice = trace_back_[1] == INT_MAX ? -1 : trace_back_[1];
    s.slices_before_cutoff.assign(trace_back_ + 2, trace_back_ + 2 + trace_cutoffs_);
    trace_back_ = nullptr;  // upload_staging_'s: the next layer_images reuses it
    return s;
  }

  void begin_bev(std::size_t pixels) override {
    bev_pixels_ = pixels;
    // Cleared by the first of layer_images (behind its layer kernel) and
    // finish_beam: queued here, the 25 MB memset of the water cube's BEV ran
    // between the fluence spreading and the layer kernel (which then started
    // 22 µs after the spreading; behind it, 11 µs: H100 timelines).
    bev_.reserve(std::max<std::size_t>(pixels, 1));
    bev_cleared_ = false;
  }

  /// The beam's BEV dose cleared in stream_ once since begin_bev (before the
  /// first superposition adds into it, or the resampling reads it).
  void clear_bev() {
    if (bev_cleared_) return;
    zero(bev_, bev_pixels_, stream_);
    bev_cleared_ = true;
  }

  /// The same in beside_stream_, after stream_'s work so far (the last
  /// beam's resampling read the BEV); stream_ must wait for
  /// bev_cleared_event_ before it adds into the BEV (join_bev_clear).
  /// Queued before the layer kernel, the clearing (25 MB on the water cube,
  /// ~20 µs) runs beside it, not between it and the superposition, which
  /// the engine's host waits for.
  void clear_bev_beside() {
    if (bev_cleared_) return;
    fork_beside();
    zero(bev_, bev_pixels_, beside_stream_);
    PD_CUDA_CHECK(cudaEventRecord(bev_cleared_event_, beside_stream_));
    bev_cleared_ = true;
  }
  /// stream_ waits for clear_bev_beside's clearing (done long ago, or never
  /// recorded: no wait).
  void join_bev_clear() { PD_CUDA_CHECK(cudaStreamWaitEvent(stream_, bev_cleared_event_, 0)); }

  /// beside_stream_ waits for the work queued in stream_ so far.
  void fork_beside() {
    PD_CUDA_CHECK(cudaEventRecord(stream_fork_, stream_));
    PD_CUDA_CHECK(cudaStreamWaitEvent(beside_stream_, stream_fork_, 0));
  }

  LayerImagesSummary layer_images(const kernels::LayerStackArgs& shared_in, std::size_t stack_slices,
                                  std::vector<HostLayerTables>& layers, bool halo) override {
    const BevGeometry& g = shared_in.grid;
    const std::size_t n = stack_slices * g.plane();
    // No clearing: the layer kernel writes every pixel of the stack inside
    // its layers' fluence boxes, and nothing reads the others (SliceBox).
    // Memory new to the stack holds NaN until then: a reader outside the
    // boxes would show in the dose or as an invalid pixel, not read zeros by
    // chance (fresh device memory often is).
    for (DeviceBuffer<float>* b : {&image_, &sigma_x_, &sigma_y_}) {
      if (b->capacity() >= n) continue;
      b->reserve(n);
      PD_CUDA_CHECK(cudaMemsetAsync(b->get(), 0xFF, n * sizeof(float), stream_));  // all bits set: a NaN
    }
    // The halo: sums over column groups (ColumnBinnedHaloStore).
    const int column_bin = shared_in.halo_column_bin;
    check_halo_column_bin(column_bin);
    const LayerRayLayout layout{column_bin, (g.cols + column_bin - 1) / column_bin, g.rows};
    if (halo) {
      const std::size_t bins = stack_slices * static_cast<std::size_t>(layout.bins_per_row) * g.rows;
      halo_share_sum_.reserve(bins);
      halo_weighted_sum_.reserve(bins);
    }
    halo_column_bin_ = column_bin;
    // The previous stage synchronised the stream: its copies are done.
    const std::size_t staging_bytes = layer_stage_bytes(layers);
    upload_staging_.begin(staging_bytes);
    stage_mirror_.reserve(staging_bytes);
    clear_bev_beside();  // beside the rest of the stage; joined behind the layer kernel
    upload_staged_layers();
    HostTimeline::mark("layers: staged packs uploaded");
    const std::size_t first_layer = staged_group_first_layer(layers, beam_packs_.front()->layers.size());
    // The fluence of every layer of the beam, where spread_beam_fluence
    // spread it (fluence_ then holds the beam's layers, this group's from
    // first_layer on); else spread here, the group's layers from plane 0.
    const bool spread_before = fluence_spread_;
    if (spread_before) check_spread_fluence(g, layers, first_layer, shared_in.spot_cutoff_sigmas);
    const std::size_t fluence_first_layer = spread_before ? first_layer : 0;
    // What the stage reads from the host — the layers' spreading σ, their
    // tables (with the in-air σ) and the sums' seed — packed into one pinned
    // block and uploaded in one copy into its device mirror: four copies
    // were ~45 µs of the host's time here with the GPU idle (H100 host).
    if (!spread_before) fluence_.reserve(std::max<std::size_t>(layers.size() * g.plane(), 1));
    const double* sigma_px = spread_before ? nullptr : pack_spread_sigma(g, layers);
    const kernels::LayerTables<float>* tables = pack_layer_tables(layers, first_layer, fluence_first_layer, g.plane());
    LayerSums* seed = upload_staging_.take<LayerSums>(1);
    *seed = LayerSums{};
    upload_staging_.upload_all(stage_mirror_.get(), stream_);
    LayerSums* d = upload_staging_.in_mirror(stage_mirror_.get(), seed);
    HostTimeline::mark("layers: tables uploaded");
    slice_summary_.reserve(kSliceSummaryFields * stack_slices);
    slice_boxes_.reserve(std::max<std::size_t>(stack_slices, 1));
    if (!spread_before) fluence_boxes_.reserve(std::max<std::size_t>(layers.size(), 1));
    const std::size_t boxes_to_reset = spread_before ? 0 : layers.size();
    if (const std::size_t threads = std::max(stack_slices, boxes_to_reset); threads > 0) {  // no blocks: a launch error
      reset_layer_stage_kernel<<<blocks_for(threads), kThreads, 0, stream_>>>(slice_summary_.get(), stack_slices,
                                                                            fluence_boxes_.get(), boxes_to_reset);
      PD_CUDA_CHECK_LAUNCH("reset_layer_stage_kernel");
    }
    if (!spread_before) {
      spread_spots(g, layers.size(), first_layer, shared_in.spot_cutoff_sigmas, sigma_px,
                   upload_staging_.in_mirror(stage_mirror_.get(), sigma_px));
      HostTimeline::mark("layers: spots spread");
    }
    const kernels::LayerStackArgs s =
        bind_stack(shared_in, {wepl_far_.get(), trace_density_.get(), rho_over_x_.get(), step_.get(), image_.get(),
                               sigma_x_.get(), sigma_y_.get(), nullptr, nullptr});  // the halo: column sums
    const kernels::LayerTables<float>* device_tables = upload_staging_.in_mirror(stage_mirror_.get(), tables);
    const dim3 layer_grid(static_cast<unsigned>(layers.size()), blocks_for(layout.threads()));
    // The layers' tables in shared memory (kernels::LayerSharedTables), room
    // for the largest; past kMaxLayerTableSharedBytes they are read from
    // global memory.
    std::size_t table_bytes = 0;
    for (const HostLayerTables& h : layers)
      table_bytes = std::max(table_bytes, kernels::LayerSharedTables(kernels::curve_node_count(*h.curve),
                                                                     static_cast<int>(h.energy_mev->size()),
                                                                     !h.halo_weight->empty(), h.scalars.slices)
                                              .bytes);
    const bool tables_in_shared = table_bytes <= kMaxLayerTableSharedBytes;
    const std::size_t dynamic_shared = tables_in_shared ? table_bytes : 0;
    const auto launch = [&](auto kernel) {
      if (dynamic_shared > kDefaultDynamicSharedBytes)
        PD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kMaxLayerTableSharedBytes)));
      kernel<<<layer_grid, kThreads, dynamic_shared, stream_>>>(
          s, layout, halo ? halo_share_sum_.get() : nullptr, halo ? halo_weighted_sum_.get() : nullptr, device_tables,
          &d->energy, &d->overshoot, &d->max_variance_bits, slice_summary_.get(), stack_slices,
          fluence_boxes_.get() + fluence_first_layer, slice_boxes_.get());
    };
    const auto launch_for_tables = [&](auto index_type, auto column_bin_constant) {
      using Index = decltype(index_type);
      constexpr int kColumnBin = decltype(column_bin_constant)::value;
      if (tables_in_shared) launch(layer_kernel<Index, kColumnBin, true>);
      else launch(layer_kernel<Index, kColumnBin, false>);
    };
    const auto launch_for_bin = [&](auto index_type) {
      switch (column_bin) {
        case 1: launch_for_tables(index_type, std::integral_constant<int, 1>{}); break;
        case 2: launch_for_tables(index_type, std::integral_constant<int, 2>{}); break;
        case 4: launch_for_tables(index_type, std::integral_constant<int, 4>{}); break;
        default: launch_for_tables(index_type, std::integral_constant<int, 8>{}); break;
      }
    };
    device_mark("layer kernel starts", stream_);
    if (n <= UINT32_MAX && trace_pixels_ <= UINT32_MAX) launch_for_bin(unsigned{});
    else launch_for_bin(std::size_t{});
    PD_CUDA_CHECK_LAUNCH("layer_kernel");
    device_mark("layer kernel done", stream_);
    HostTimeline::mark("layers: layer kernel launched");
    // The sums' read-back right behind the kernel, waited for only after
    // this thread has queued the rest of the stage: behind the BEV's
    // clearing and the groups' uploads, they came back 45–55 µs after the
    // kernel, now ~18 (water cube, H100).
    PD_CUDA_CHECK(cudaMemcpyAsync(&pinned_->layer_back, d, sizeof(LayerSums), cudaMemcpyDeviceToHost, stream_));
    PD_CUDA_CHECK(cudaEventRecord(layer_sums_back_, stream_));
    join_bev_clear();  // the core superposition (its column pass adds into the BEV) waits for stream_
    stage_stack_groups(layers, stack_slices, static_cast<int>(bev_pixels_ / g.plane()));
    device_mark("groups staged", stream_);
    // The core superposition's analysis and its bucket counts, queued right
    // behind the layer kernel and the groups: the GPU analyses while this
    // thread reads the sums back and the engine sizes and starts the halo
    // (superpose_stack then goes on from the counts, after waiting for this
    // stream). Started by superpose_stack, it began ~120 µs after the layer
    // kernel, with the GPU idle but for the halo's binning (water cube, H100).
    const SuperpositionInput core = core_superposition_input(g, stack_slices);  // reserves stack_out_
    superposer_.queue_analysis(core, stack_out_.get(), stream_);
    // What the halo's binning reads (the halo sums, the groups' depth
    // slices): start_halo's stream waits for this, not its host.
    PD_CUDA_CHECK(cudaEventRecord(layer_images_done_, stream_));
    start_plan_host_volume();
    if (halo) spawn_halo_thread();  // while the layer kernel runs
    PD_CUDA_CHECK(cudaEventSynchronize(layer_sums_back_));
    const LayerSums sums = pinned_->layer_back;
    HostTimeline::mark("layers: done (sums back)");
    LayerImagesSummary out;
    out.energy_mev = sums.energy;
    out.overshoot_px = sums.overshoot;
    float v;
    std::memcpy(&v, &sums.max_variance_bits, sizeof v);
    out.max_halo_variance_mm2 = v;
    return out;
  }

  std::size_t superpose_stack(const BevGeometry& g, std::size_t stack_slices,
                              const std::vector<HostLayerTables>& layers) override {
    // The stack's slices summed per depth into the beam's BEV dose by the
    // superposer (SuperpositionInput::groups): its column pass adds the
    // uniform slices there directly, instead of writing the stack's output
    // for a pass of our own to read back (0.78 GB on the water cube). The
    // groups are those layer_images put on the device (stage_stack_groups).
    (void)layers;
    const int bev_slices = static_cast<int>(bev_pixels_ / g.plane());
    check_stack_staged("superpose_stack", stack_slices, bev_slices, groups_stack_slices_, groups_bev_slices_);
    // The superposer runs in a stream of its own and waits for it before it
    // returns: the layer images and the groups must be in place when it
    // starts, and its output may be used in this stream right after.
    clear_bev();  // (layer_images did, behind its kernel)
    PD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Its analysis was queued by layer_images (the same input: it goes on
    // from there).
    const SuperpositionInput core = core_superposition_input(g, stack_slices);  // reserves stack_out_
    superposer_.superpose_device(core, stack_out_.get());  // stack_out_: the superposer's scratch
    device_mark("core superposition done (as the host saw it)", stream_);
    return static_cast<std::size_t>(superposer_.last_split().separable_slices);
  }

  /// The core stack's superposition request (superpose_stack; queued by
  /// layer_images): the layer images, summed per depth into the beam's BEV
  /// dose. stack_out_ (the superposer's scratch) is reserved for it.
  SuperpositionInput core_superposition_input(const BevGeometry& g, std::size_t stack_slices) {
    const int bev_slices = static_cast<int>(bev_pixels_ / g.plane());
    const std::size_t n = stack_slices * g.plane();
    stack_out_.reserve(n);
    SuperpositionInput in;
    in.shape = {static_cast<int>(stack_slices), g.rows, g.cols};
    in.image = {image_.get(), n};
    in.sigma_x_px = {sigma_x_.get(), n};
    in.sigma_y_px = {sigma_y_.get(), n};
    // The layer kernel's summary of this stack: the superposer's analysis
    // then reads only the slices it leaves open.
    // And its slices' boxes: the superposer reads nothing outside the
    // layers' spot fluence (on the water cube, 57 % of the stack's pixels
    // are inside), where the layer kernel wrote nothing. Both are of the
    // last layer_images' stack (its caller, or superpose_stack after
    // check_stack_staged), as the groups are.
    in.slice_summary = slice_summary_.get();
    in.slice_box = slice_boxes_.get();
    in.groups = {bev_slices, group_begin_.get(), group_members_.get(), bev_.get()};
    return in;
  }

  /// The halo's binning is queued here, in the halo's stream, before the
  /// core's superposition queues anything: the GPU bins while this thread
  /// waits for the core's bucket counts. (Queued by the halo's thread, it
  /// ran after the core's passes: the thread's analysis was launched only
  /// when the core's superposition ended, 0.8 ms later; H100, 2026-11-26.)
  /// The rest of the halo runs on a host thread of its own, in that stream
  /// and with its own superposer and buffers, while the calling thread
  /// superposes the stack: each superposition's host work (bucket
  /// read-backs, launches) leaves gaps on the GPU that the other's kernels
  /// fill. The thread was started by layer_images (spawn_halo_thread) and
  /// waits for this job.
  void start_halo(const BevGeometry& fine, const BevGeometry& hg, const kernels::HaloBinning& h,
                  std::size_t stack_slices, const std::vector<HostLayerTables>& layers,
                  const kernels::Affine3& beam_from_out_index) override {
    (void)fine;
    (void)layers;
    check_halo_binning(h, halo_column_bin_);
    if (!halo_job_pending_) throw InternalError("start_halo: no layer images with a halo before it");
    check_stack_staged("start_halo", stack_slices, hg.slices, groups_stack_slices_, groups_bev_slices_);
    const auto start = std::chrono::steady_clock::now();
    // The layer images' halo sums and depth slices (layer_images' event):
    // the GPU waits, not this thread.
    PD_CUDA_CHECK(cudaStreamWaitEvent(halo_stream_, layer_images_done_, 0));
    bin_halo(hg, h, stack_slices);
    device_mark("halo binned", halo_stream_);
    HostTimeline::mark("halo: binning launched");
    halo_job_pending_ = false;
    halo_job_.set_value(HaloJob{start, hg, stack_slices, beam_from_out_index});
  }

  std::optional<double> wait_halo() override {
    release_halo_thread();  // layer images with a halo, but no start_halo: the thread ends idle
    if (!halo_result_.valid()) return std::nullopt;
    return get_polled(halo_result_);
  }

  /// Ends a halo thread that waits for a job it will not get.
  void release_halo_thread() {
    if (!halo_job_pending_) return;
    halo_job_pending_ = false;
    halo_job_.set_value(std::nullopt);
  }

  /// What start_halo hands to the halo's thread, the binning queued.
  struct HaloJob {
    std::chrono::steady_clock::time_point start;  ///< start_halo's call: the halo's time counts from it
    BevGeometry coarse;
    std::size_t stack_slices;
    kernels::Affine3 beam_from_out_index;
  };

  /// Starts the halo's host thread while the layer kernel runs: it waits for
  /// start_halo's job (or for none: wait_halo, the next layer_images or the
  /// destructor end it idle), then superposes what start_halo binned.
  /// Started at start_halo instead, the thread's creation (std::async) and
  /// the binning's launches took ~0.1 ms of the calling thread between the
  /// layer images and the core's superposition, with the GPU waiting (H100
  /// host); the binning's launches are back there now, with the GPU busy.
  /// A thread per layer images (std::async), not a kept one (TaskThread):
  /// with a kept thread, compute-sanitizer racecheck did not finish the
  /// engine's GPU tests in one process (the third engine's halo never
  /// returned within 300 s; each test alone, or this way, ~15 s; H200,
  /// 2026-11-26). Not understood.
  void spawn_halo_thread() {
    release_halo_thread();  // an earlier layer images' thread that got no job (a widened retry)
    if (halo_run_.valid()) halo_run_.get();                // the earlier thread's exit
    if (halo_result_.valid()) halo_result_.get();          // rethrows what an unawaited halo threw
    halo_job_ = std::promise<std::optional<HaloJob>>();
    std::future<std::optional<HaloJob>> job = halo_job_.get_future();
    std::promise<std::optional<double>> result;
    halo_result_ = result.get_future();
    halo_job_pending_ = true;
    // The result is set before the thread exits (wait_halo does not wait for
    // the exit); the exit is joined by the next spawn or the destructor.
    halo_run_ = std::async(std::launch::async, [this, job = std::move(job), result = std::move(result)]() mutable {
      try {
        const std::optional<HaloJob> j = get_polled(job);
        if (!j) {
          result.set_value(std::nullopt);
          return;
        }
        HostTimeline::mark("halo thread: job");
        PD_CUDA_CHECK(cudaSetDevice(device_));
        run_halo(j->coarse, j->stack_slices, j->beam_from_out_index);
        result.set_value(std::chrono::duration<double>(std::chrono::steady_clock::now() - j->start).count());
      } catch (...) {
        result.set_exception(std::current_exception());
      }
    });
  }

  /// While the layer kernel runs (layer_images): the stack's slices per depth
  /// (DepthGroups: both superpositions' SliceGroups, the core's and the
  /// halo's, whose coarse grid has the same slices) and each stack slice's
  /// depth slice (the halo's binning), queued to the device behind the
  /// kernel from pinned memory of their own (upload_staging_'s copies may
  /// still be queued). Built after the layer kernel, they were ~0.1 ms of
  /// host work before the superpositions, with the GPU idle (H100 host).
  void stage_stack_groups(const std::vector<HostLayerTables>& layers, std::size_t stack_slices, int bev_slices) {
    const DepthGroups groups = depth_groups(layers, bev_slices);
    const std::vector<int> depth_slice = stack_depth_slices(layers, stack_slices);
    const std::size_t begins = groups.member_begin.size(), members = groups.member_slices.size();
    group_staging_.begin(PinnedStaging::bytes_for<int>(begins) + PinnedStaging::bytes_for<int>(members) +
                         PinnedStaging::bytes_for<int>(stack_slices));
    int* b = group_staging_.take<int>(begins);
    int* m = group_staging_.take<int>(members);
    int* d = group_staging_.take<int>(stack_slices);
    std::copy(groups.member_begin.begin(), groups.member_begin.end(), b);
    std::copy(groups.member_slices.begin(), groups.member_slices.end(), m);
    std::copy(depth_slice.begin(), depth_slice.end(), d);
    upload(group_begin_, b, begins, stream_);
    upload(group_members_, m, members, stream_);
    upload(depth_slice_, d, stack_slices, stream_);
    groups_stack_slices_ = stack_slices;
    groups_bev_slices_ = bev_slices;
  }

  /// Queues the binning of the layer images' halo sums onto the coarse grid
  /// (halo_in_: image, σx, σy) in halo_stream_.
  void bin_halo(const BevGeometry& hg, const kernels::HaloBinning& h, std::size_t stack_slices) {
    const std::size_t n = stack_slices * hg.plane();
    halo_in_.reserve(3 * n);
    float* image = halo_in_.get();
    if (n == 0) return;  // a grid of no blocks is a launch error
    halo_slice_summary_.reserve(kSliceSummaryFields * stack_slices);
    halo_slice_boxes_.reserve(stack_slices);
    reset_slice_summary_kernel<<<blocks_for(stack_slices), kThreads, 0, halo_stream_>>>(halo_slice_summary_.get(),
                                                                                       stack_slices);
    PD_CUDA_CHECK_LAUNCH("reset_slice_summary_kernel (halo)");
    halo_bin_kernel<<<blocks_for(n), kThreads, 0, halo_stream_>>>(
        h, hg, kernels::VoxelIndexer(hg.cols, hg.rows, static_cast<int>(stack_slices)), depth_slice_.get(),
        stack_slices, halo_share_sum_.get(), halo_weighted_sum_.get(), image, image + n, image + 2 * n,
        halo_slice_summary_.get(), slice_boxes_.get(), halo_slice_boxes_.get());
    PD_CUDA_CHECK_LAUNCH("halo_bin_kernel");
  }

  /// After bin_halo: the coarse stack's superposition and the stack summed
  /// per depth into halo_bev_, which finish_beam resamples with the core's
  /// dose (pending_halo_) — in halo_stream_, with halo_superposer_ and
  /// buffers of the halo's own; returns with the work done.
  void run_halo(const BevGeometry& hg, std::size_t stack_slices, const kernels::Affine3& beam_from_out_index) {
    // An earlier layer group's coarse dose still waits for finish_beam: into
    // the beam dose now, before its buffer is reused (the binning queued
    // before it writes halo_in_, not halo_bev_).
    if (pending_halo_) {
      if (!beam_holds_dose_) zero(beam_, og_.voxel_count(), halo_stream_);
      resample_into_beam(*pending_halo_, halo_bev_.get(), beam_from_out_index, halo_stream_);
      beam_holds_dose_ = true;
      pending_halo_.reset();
    }
    const std::size_t hplane = hg.plane(), n = stack_slices * hplane;
    float* image = halo_in_.get();
    // The coarse stack summed per depth into halo_bev_ by the superposer, as the core's.
    const std::size_t halo_bev_pixels = hplane * static_cast<std::size_t>(hg.slices);
    zero(halo_bev_, halo_bev_pixels, halo_stream_);
    halo_stack_out_.reserve(n);
    SuperpositionInput in;
    in.shape = {static_cast<int>(stack_slices), hg.rows, hg.cols};
    in.image = {image, n};
    in.sigma_x_px = {image + n, n};
    in.sigma_y_px = {image + 2 * n, n};
    in.slice_summary = halo_slice_summary_.get();  // bin_halo's
    in.slice_box = halo_slice_boxes_.get();         // bin_halo's, from the layer kernel's
    // The core's groups (stage_stack_groups; read only, by both superposers).
    in.groups = {hg.slices, group_begin_.get(), group_members_.get(), halo_bev_.get()};
    // The analysis queued behind the binning, then this thread waits for
    // the binning (superpose_device starts from the host's view of the
    // arrays): the GPU analyses while this thread wakes. Launched after the
    // wait, the analysis began ~50 µs after the binning ended and its counts
    // came back ~85 µs after it; queued here, ~58 (water cube, H100).
    halo_superposer_.queue_analysis(in, halo_stack_out_.get(), halo_stream_);
    PD_CUDA_CHECK(cudaStreamSynchronize(halo_stream_));
    HostTimeline::mark("halo thread: binned");
    halo_superposer_.superpose_device(in, halo_stack_out_.get());  // returns with it done
    device_mark("halo superposition done (as the host saw it)", halo_stream_);
    pending_halo_ = hg;  // resampled by finish_beam, with the core's dose
    HostTimeline::mark("halo thread: done");
  }

  /// The plan's last beam also scales and checks the plan in the same pass,
  /// with one read-back for both: finish_plan then reports what it found.
  BeamDoseCheck finish_beam(const BevGeometry& g, const kernels::Affine3& beam_from_out_index, bool dose_to_water,
                            std::optional<double> last_beam_plan_scale) override {
    const std::size_t n = og_.voxel_count();
    clear_bev();  // a beam whose layers added nothing: no layer_images cleared it
    sums_.reserve(sizeof(Sums));
    upload_seed(sums_.get(), &pinned_->finish_seed, sizeof(Sums));
    auto* d = reinterpret_cast<Sums*>(sums_.get());
    const HaloDose halo{pending_halo_.value_or(BevGeometry{}), pending_halo_ ? halo_bev_.get() : nullptr};
    const PlanCheck plan_check = last_beam_plan_scale
                                     ? PlanCheck{*last_beam_plan_scale, &d->plan_first_bad, &d->plan_max_bits}
                                     : PlanCheck{1.0, nullptr, nullptr};
    const float* density = dose_to_water ? current_->output_rsp() : current_->output_density();
    const bool vector_io = is_16_byte_aligned(beam_.get()) && is_16_byte_aligned(plan_.get()) &&
                           is_16_byte_aligned(density);
    device_mark("resampling starts", stream_);
    resample_finish_kernel<<<blocks_for((n + kResampleRun - 1) / kResampleRun), kThreads, 0, stream_>>>(
        g, bev_.get(), halo, beam_from_out_index, kernels::VoxelIndexer(og_.size[0], og_.size[1], og_.size[2]), n,
        beam_holds_dose_, beam_.get(), density, plan_.get(), plan_holds_dose_, vector_io, &d->beam_first_bad,
        &d->dose_times_density, plan_check);
    plan_holds_dose_ = true;
    PD_CUDA_CHECK_LAUNCH("resample_finish_kernel");
    device_mark("resampling done", stream_);
    HostTimeline::mark("finish: resampling launched");
    pending_halo_.reset();
    copy_to_host(&pinned_->finish_back, sums_.get(), sizeof(Sums));
    flush_device_marks();
    const Sums sums = pinned_->finish_back;
    BeamDoseCheck c;
    c.dose_times_density = sums.dose_times_density;
    if (sums.beam_first_bad != ULLONG_MAX) {
      c.first_bad_voxel = static_cast<long long>(sums.beam_first_bad);
      copy_to_host(&c.bad_value, beam_.get() + sums.beam_first_bad, sizeof(float));
    }
    if (last_beam_plan_scale) finished_plan_ = {*last_beam_plan_scale, plan_summary(sums)};
    return c;
  }

  PlanDoseSummary finish_plan(double scale) override {
    if (finished_plan_) {  // by the last beam's finish_beam
      const auto [done_scale, summary] = *finished_plan_;
      finished_plan_.reset();
      if (done_scale != scale) throw InternalError("finish_plan: the last beam scaled the plan by another factor");
      return summary;
    }
    ensure_plan_written();
    const std::size_t n = og_.voxel_count();
    sums_.reserve(sizeof(Sums));
    upload_seed(sums_.get(), &pinned_->finish_seed, sizeof(Sums));
    auto* d = reinterpret_cast<Sums*>(sums_.get());
    finish_plan_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(plan_.get(), n,
                                                               PlanCheck{scale, &d->plan_first_bad, &d->plan_max_bits});
    PD_CUDA_CHECK_LAUNCH("finish_plan_kernel");
    copy_to_host(&pinned_->finish_back, sums_.get(), sizeof(Sums));
    const Sums sums = pinned_->finish_back;
    return plan_summary(sums);
  }

  Volume<float> beam_dose() override { return download(beam_, {}); }
  Volume<float> plan_dose() override {
    ensure_plan_written();
    return download(plan_, plan_host_.valid() ? plan_host_.get() : Volume<float>{});
  }

 private:
  /// The plan dose zeroed if no beam has written it since begin_plan (a plan
  /// whose beams all add no dose).
  void ensure_plan_written() {
    if (plan_holds_dose_) return;
    zero(plan_, og_.voxel_count(), stream_);
    plan_holds_dose_ = true;
  }

  /// What finish_beam and finish_plan read back.
  struct Sums {
    unsigned long long beam_first_bad = ULLONG_MAX;
    double dose_times_density = 0;
    unsigned long long plan_first_bad = ULLONG_MAX;
    unsigned plan_max_bits = 0;
  };
  /// What layer_images reads back.
  struct LayerSums {
    double energy = 0.0;
    int overshoot = INT_MIN;
    unsigned max_variance_bits = 0u;
  };
  /// Pinned host memory for the executor's small transfers: the seeds its
  /// kernels' atomics start from, and the slots their results come back in.
  /// From pageable memory, each upload was ~10–15 µs of host staging between
  /// the stages, with the GPU waiting (H100 host); from here they are DMA.
  /// The seeds are never written after construction, so a copy still in
  /// flight never reads a changed value.
  struct PinnedSmall {
    int trace_seeds[2] = {INT_MAX, INT_MAX};  ///< start_trace's entry and first-material minima
    LayerSums layer_back;
    Sums finish_seed, finish_back;
  };
  PinnedSmall* pinned_ = nullptr;

  /// With the host timeline on (HostTimeline; protondose-engine-bench
  /// --timeline): a timing event where `stream` reaches this point, placed
  /// on the host clock by flush_device_marks (printed as "gpu" marks). The first
  /// mark of a computation anchors them at the host time it was recorded:
  /// right where the GPU is idle (a warm computation's start), they read as
  /// when the GPU got there, within its launch latency. Each costs the host
  /// an event record (a few µs). The machines of this project have no Nsight
  /// Systems; this shows the GPU's idle gaps between the stages.
  void device_mark(const char* what, cudaStream_t stream) {
    if (!HostTimeline::enabled()) return;
    std::lock_guard<std::mutex> lock(device_marks_mutex_);
    if (device_marks_.size() == device_mark_events_.size()) {
      cudaEvent_t e = nullptr;
      PD_CUDA_CHECK(cudaEventCreate(&e));
      device_mark_events_.push_back(e);
    }
    const cudaEvent_t e = device_mark_events_[device_marks_.size()];
    if (device_marks_.empty()) device_marks_anchor_us_ = HostTimeline::now_us();
    PD_CUDA_CHECK(cudaEventRecord(e, stream));
    device_marks_.emplace_back(what, e);
  }

  /// The device marks into the host timeline, once every stream they were
  /// recorded in has passed them.
  void flush_device_marks() {
    std::lock_guard<std::mutex> lock(device_marks_mutex_);
    for (const auto& [what, e] : device_marks_) {
      float ms = 0;
      PD_CUDA_CHECK(cudaEventElapsedTime(&ms, device_marks_.front().second, e));
      HostTimeline::mark_at(what, device_marks_anchor_us_ + 1e3 * ms);
    }
    device_marks_.clear();
  }

  /// Host to device from pinned_, in the executor's stream, without waiting.
  void upload_seed(void* d, const void* pinned_source, std::size_t bytes) {
    PD_CUDA_CHECK(cudaMemcpyAsync(d, pinned_source, bytes, cudaMemcpyHostToDevice, stream_));
  }

  PlanDoseSummary plan_summary(const Sums& sums) {
    PlanDoseSummary p;
    float m;
    std::memcpy(&m, &sums.plan_max_bits, sizeof m);
    p.max_dose = m;
    if (sums.plan_first_bad != ULLONG_MAX) {
      p.first_bad_voxel = static_cast<long long>(sums.plan_first_bad);
      copy_to_host(&p.bad_value, plan_.get() + sums.plan_first_bad, sizeof(float));
    }
    return p;
  }

  /// Through a ring of two small pinned staging buffers: the copy of chunk
  /// c + 1 over PCIe runs while the host copies chunk c out, so a download
  /// takes about the longer of the two, not their sum. A pageable copy of a
  /// 256³ dose ran at ~1.3 GB/s on the H100 host; pinning a buffer of the
  /// dose's size costs about as much as the copy it speeds up, which a
  /// one-shot `compute` process would pay for nothing. The ring is pinned once
  /// per engine (16 MB).
  /// `v`: the host volume made ahead (plan_host_), or an empty one.
  Volume<float> download(const DeviceBuffer<float>& d, Volume<float> v) {
    if (v.grid != og_ || v.data.size() != og_.voxel_count()) v = Volume<float>(og_, 0.0f);
    const std::size_t bytes = v.data.size() * sizeof(float);
    make_staging();
    const auto* src = reinterpret_cast<const unsigned char*>(d.get());
    auto* dst = reinterpret_cast<unsigned char*>(v.data.data());
    const std::size_t chunks = (bytes + kStagingBytes - 1) / kStagingBytes;
    const auto chunk_bytes = [&](std::size_t c) { return std::min(kStagingBytes, bytes - c * kStagingBytes); };
    const auto enqueue = [&](std::size_t c) {
      PD_CUDA_CHECK(cudaMemcpyAsync(download_staging_[c % 2], src + c * kStagingBytes, chunk_bytes(c), cudaMemcpyDeviceToHost, stream_));
      PD_CUDA_CHECK(cudaEventRecord(download_staged_[c % 2], stream_));
    };
    for (std::size_t c = 0; c < std::min<std::size_t>(chunks, 2); ++c) enqueue(c);
    for (std::size_t c = 0; c < chunks; ++c) {
      PD_CUDA_CHECK(cudaEventSynchronize(download_staged_[c % 2]));
      std::memcpy(dst + c * kStagingBytes, download_staging_[c % 2], chunk_bytes(c));
      if (c + 2 < chunks) enqueue(c + 2);
    }
    return v;
  }

  /// Device to host in the executor's stream, then waits for it: the host
  /// reads `h` next.
  void copy_to_host(void* h, const void* d, std::size_t bytes) {
    PD_CUDA_CHECK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream_));
    PD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  /// The pinned ring of download(), made at first use.
  void make_staging() {
    if (download_staging_[0] != nullptr) return;
    for (int b = 0; b < 2; ++b) {
      PD_CUDA_CHECK(cudaMallocHost(&download_staging_[b], kStagingBytes));
      PD_CUDA_CHECK(cudaEventCreateWithFlags(&download_staged_[b], cudaEventDisableTiming));
    }
  }

  /// Where a beam's staging put a layer: its spots in BeamPack::spots, its
  /// curve in BeamPack::doubles (kernels::CurveNode, 16-byte aligned: the
  /// kernel reads a node with two 16-byte loads) and its WEPL tables in
  /// BeamPack::floats.
  struct StagedLayer {
    std::size_t spot_begin = 0, spot_end = 0;
    std::size_t curve = 0;  ///< in doubles
    std::size_t energy = 0, scattering = 0, halo_weight = 0, halo_sigma = 0;
    int curve_nodes = 0, wepl_nodes = 0;
    bool has_halo = false;
  };

  /// A staged beam in device memory: its layers' spots and tables, as
  /// `layers` places them, kept under the key of its prepared plan's beam.
  struct BeamPack {
    StagedBeamKey key;
    bool uploaded = false;  ///< the buffers hold the key's beam (else: being packed, or stale)
    std::vector<StagedLayer> layers;
    DeviceBuffer<DeviceSpot> spots;
    DeviceBuffer<double> doubles;
    DeviceBuffer<float> floats;
  };
  /// Beams kept in device memory (a robust run or a series of CTs computes
  /// one plan again and again; a clinical plan has a few beams); the least
  /// recently staged goes first, its buffers reused.
  static constexpr std::size_t kCachedBeams = 8;

  void stage_beam_layers(const std::vector<HostLayerTables>& layers, StagedBeamKey key) override {
    staged_group_first_layer(layers, layers.size());  // the beam's layers in order, from 0
    // The previous beam's packing ended with its first layer_images, or is
    // released here (an error after its staging).
    wait_staged_layers();
    beam_staged_ = true;
    // A beam kept from an earlier computation of its plan: nothing to do.
    if (key.plan_id != 0)
      for (std::size_t i = 0; i < beam_packs_.size(); ++i)
        if (beam_packs_[i]->uploaded && beam_packs_[i]->key == key) {
          std::rotate(beam_packs_.begin(), beam_packs_.begin() + static_cast<std::ptrdiff_t>(i),
                      beam_packs_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
          HostTimeline::mark("staging: the beam is in device memory");
          return;
        }
    // Otherwise into a pack whose buffers are reused: for a plan prepared
    // for one computation (plan_id 0), the pack such a plan used last, so
    // that a series of them keeps one pack (not a new pack, and its device
    // allocations, for each of the first kCachedBeams); else the least
    // recently used pack, or a new one.
    std::size_t reuse = beam_packs_.size();
    if (key.plan_id == 0)
      for (std::size_t i = 0; i < beam_packs_.size() && reuse == beam_packs_.size(); ++i)
        if (beam_packs_[i]->key.plan_id == 0) reuse = i;
    if (reuse == beam_packs_.size()) {
      if (beam_packs_.size() < kCachedBeams) beam_packs_.push_back(std::make_unique<BeamPack>());
      reuse = beam_packs_.size() - 1;
    }
    std::rotate(beam_packs_.begin(), beam_packs_.begin() + static_cast<std::ptrdiff_t>(reuse),
                beam_packs_.begin() + static_cast<std::ptrdiff_t>(reuse) + 1);
    BeamPack& pack = *beam_packs_.front();
    pack.key = key;
    pack.uploaded = false;
    std::size_t spot_count = 0, doubles = 0, floats = 0;
    const auto place = [](std::size_t& size, const std::vector<double>& v) {
      const std::size_t at = size;
      size += v.size();
      return at;
    };
    pack.layers.assign(layers.size(), StagedLayer{});
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const HostLayerTables& h = layers[i];
      StagedLayer& o = pack.layers[i];
      o.spot_begin = spot_count;
      spot_count += h.spots->size();
      o.spot_end = spot_count;
      static_assert(sizeof(kernels::CurveNode) % (2 * sizeof(double)) == 0);
      o.curve = doubles;  // even: every node is a whole number of 16-byte pairs
      doubles += h.curve->size() * (sizeof(kernels::CurveNode) / sizeof(double));
      o.energy = place(floats, *h.energy_mev);
      o.scattering = place(floats, *h.scattering_factor);
      o.halo_weight = place(floats, *h.halo_weight);
      o.halo_sigma = place(floats, *h.halo_sigma_mm);
      o.curve_nodes = kernels::curve_node_count(*h.curve);  // the pads travel too (doubles, memcpy)
      o.wepl_nodes = static_cast<int>(h.energy_mev->size());
      o.has_halo = !h.halo_weight->empty();
    }
    beam_staging_.begin(PinnedStaging::bytes_for<DeviceSpot>(spot_count) + PinnedStaging::bytes_for<double>(doubles) +
                        PinnedStaging::bytes_for<float>(floats));
    StagedPacks packs{beam_staging_.take<DeviceSpot>(spot_count), spot_count,
                      beam_staging_.take<double>(doubles),        doubles,
                      beam_staging_.take<float>(floats),          floats};
    staged_packs_ = packs;
    // The packing runs on the two staging threads, so that this thread goes
    // on to the trace's read-back and the per-slice tables; the first
    // layer_images waits for it and uploads (upload_staged_layers). Pure
    // host work. The first thread packs the spots of the first layers, the
    // second the curves and tables, then the other layers' spots, split so
    // that both take about as long (one spot ~6 table values; 137 µs for the
    // water cube's 21,780 spots and 77 µs for its 20 layers' tables on an
    // H100 host, each on a thread of its own, the spots last by 33 µs).
    const std::size_t table_values = doubles + floats;
    const std::size_t half = (spot_count + table_values / 6) / 2;
    std::size_t split = 0;
    while (split < pack.layers.size() && pack.layers[split].spot_end <= half) ++split;
    const auto job = std::make_shared<const StagingJob>(
        StagingJob{layers, std::make_shared<const std::vector<StagedLayer>>(pack.layers), packs, split});
    staged_spot_packing_ = staging_thread_.run([job] { pack_spots(*job, 0, job->split_layer, "staging thread: spots packed"); });
    staged_table_packing_ = table_staging_thread_.run([job] {
      pack_tables(*job);
      pack_spots(*job, job->split_layer, job->layers.size(), "table thread: tables and spots packed");
    });
  }

  /// Where stage_beam_layers packs: pinned host arrays of beam_staging_.
  struct StagedPacks {
    DeviceSpot* spots;
    std::size_t spot_count;
    double* doubles;
    std::size_t double_count;
    float* floats;
    std::size_t float_count;
  };

  /// What stage_beam_layers hands to the staging threads.
  struct StagingJob {
    std::vector<HostLayerTables> layers;
    std::shared_ptr<const std::vector<StagedLayer>> staged;
    StagedPacks packs;
    std::size_t split_layer;  ///< the first thread packs the spots of layers [0, split_layer)
  };

  static void pack_spots(const StagingJob& j, std::size_t first_layer, std::size_t end_layer, const char* done) {
    const std::vector<HostLayerTables>& layers = j.layers;
    std::size_t n = first_layer < end_layer ? (*j.staged)[first_layer].spot_begin : 0;
    for (std::size_t i = first_layer; i < end_layer; ++i)
      for (const SpotProtons& sp : *layers[i].spots)
        j.packs.spots[n++] = {sp.x_iso_mm, sp.y_iso_mm, sp.protons, static_cast<int>(i)};
    HostTimeline::mark(done);
  }

  static void pack_tables(const StagingJob& j) {
    const std::vector<HostLayerTables>& layers = j.layers;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const HostLayerTables& h = layers[i];
      const StagedLayer& o = (*j.staged)[i];
      double* d = j.packs.doubles;
      float* f = j.packs.floats;
      std::memcpy(d + o.curve, h.curve->data(), h.curve->size() * sizeof(kernels::CurveNode));
      std::copy(h.energy_mev->begin(), h.energy_mev->end(), f + o.energy);  // double → float
      std::copy(h.scattering_factor->begin(), h.scattering_factor->end(), f + o.scattering);
      std::copy(h.halo_weight->begin(), h.halo_weight->end(), f + o.halo_weight);
      std::copy(h.halo_sigma_mm->begin(), h.halo_sigma_mm->end(), f + o.halo_sigma);
    }
  }

  void wait_staged_layers() noexcept override {
    try {
      finish_staged_packing();
    } catch (...) {
      // The packing's own error is not the computation's: that one is unwinding.
    }
  }

  /// Waits for the staged packing, if any (rethrows what it threw).
  void finish_staged_packing() {
    std::exception_ptr error;
    for (std::future<void>* f : {&staged_spot_packing_, &staged_table_packing_}) {
      if (!f->valid()) continue;
      try {
        get_polled(*f);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }

  /// The staged packs' uploads into the beam's pack, once their packing is
  /// done (the first layer_images of the beam; later groups, and later
  /// computations of a kept beam, find them uploaded).
  void upload_staged_layers() {
    if (!beam_staged_) throw InternalError("layer_images: the beam's layers were not staged after its trace");
    BeamPack& pack = *beam_packs_.front();
    if (pack.uploaded) return;
    finish_staged_packing();  // polled: the GPU waits for it
    const StagedPacks& packs = staged_packs_;
    upload(pack.spots, packs.spots, packs.spot_count, stream_);
    upload(pack.doubles, packs.doubles, packs.double_count, stream_);
    upload(pack.floats, packs.floats, packs.float_count, stream_);
    pack.uploaded = true;
  }

  /// What layer_images packs into upload_staging_: the spreading σ, the
  /// tables and their in-air σ, the sums' seed.
  static std::size_t layer_stage_bytes(const std::vector<HostLayerTables>& layers) {
    std::size_t floats = 0;
    for (const HostLayerTables& h : layers) floats += h.air_sigma_x_mm->size() + h.air_sigma_y_mm->size();
    return PinnedStaging::bytes_for<double>(2 * layers.size()) + PinnedStaging::bytes_for<float>(floats) +
           PinnedStaging::bytes_for<kernels::LayerTables<float>>(layers.size()) + PinnedStaging::bytes_for<LayerSums>(1);
  }

  /// Each layer's spreading σ in pixels, [layer][x, y], into upload_staging_.
  double* pack_spread_sigma(const BevGeometry& g, const std::vector<HostLayerTables>& layers) {
    double* sigma_px = upload_staging_.take<double>(2 * layers.size());
    for (std::size_t l = 0; l < layers.size(); ++l)
      spread_sigma_px(g, layers[l].scalars.spread_sigma_x_iso_mm, layers[l].scalars.spread_sigma_y_iso_mm,
                      sigma_px + 2 * l);
    return sigma_px;
  }

  /// That spread_beam_fluence spread what layer_images' group of layers
  /// (from the beam's first_layer on) would have: the same lateral layout of
  /// the rays, spread σ and cut-off (an engine that gave the spreading other
  /// values than its tables would compute another dose).
  void check_spread_fluence(const BevGeometry& g, const std::vector<HostLayerTables>& layers,
                            std::size_t first_layer, double cutoff_sigmas) const {
    const BevGeometry& s = spread_grid_;
    bool same = g.cols == s.cols && g.rows == s.rows && g.x0_mm == s.x0_mm && g.y0_mm == s.y0_mm &&
                g.pitch_x_mm == s.pitch_x_mm && g.pitch_y_mm == s.pitch_y_mm && cutoff_sigmas == spread_cutoff_sigmas_ &&
                2 * (first_layer + layers.size()) <= spread_sigma_iso_mm_.size();
    for (std::size_t l = 0; same && l < layers.size(); ++l)
      same = layers[l].scalars.spread_sigma_x_iso_mm == spread_sigma_iso_mm_[2 * (first_layer + l)] &&
             layers[l].scalars.spread_sigma_y_iso_mm == spread_sigma_iso_mm_[2 * (first_layer + l) + 1];
    if (!same)
      throw InternalError("layer_images: its rays' lateral layout, spread σ or cut-off differ from those of "
                          "spread_beam_fluence");
  }

  /// The spots of the beam's layers [first_layer, first_layer + layers)
  /// spread onto the rays (fluence_, zeroed here: plane l for layer
  /// first_layer + l) and each layer's fluence box (fluence_boxes_[l],
  /// emptied by reset_layer_stage_kernel): `sigma_px` [l][x, y] as
  /// pack_spread_sigma packs it, `device_sigma_px` its device copy.
  void spread_spots(const BevGeometry& g, std::size_t layers, std::size_t first_layer, double cutoff_sigmas,
                    const double* sigma_px, const double* device_sigma_px) {
    const BeamPack& pack = *beam_packs_.front();
    const std::size_t spot_begin = layers == 0 ? 0 : pack.layers[first_layer].spot_begin;
    const std::size_t spot_end = layers == 0 ? 0 : pack.layers[first_layer + layers - 1].spot_end;
    const std::size_t spot_count = spot_end - spot_begin;
    zero(fluence_, layers * g.plane(), stream_);
    if (spot_count > 0) {
      // Shared memory for the widest box of any layer (clipped to the grid).
      int box_cols = 1, box_rows = 1;
      for (std::size_t l = 0; l < layers; ++l) {
        box_cols = std::max(box_cols, std::min(g.cols, spot_box_px(sigma_px[2 * l], cutoff_sigmas)));
        box_rows = std::max(box_rows, std::min(g.rows, spot_box_px(sigma_px[2 * l + 1], cutoff_sigmas)));
      }
      const std::size_t bytes = static_cast<std::size_t>(box_cols + box_rows) * sizeof(double);
      if (bytes > spread_shared_bytes_) {
        PD_CUDA_CHECK(cudaFuncSetAttribute(spread_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
        spread_shared_bytes_ = bytes;
      }
      spread_kernel<<<static_cast<unsigned>(spot_count), 128, bytes, stream_>>>(
          pack.spots.get() + spot_begin, static_cast<int>(first_layer), device_sigma_px, cutoff_sigmas,
          SpotPixels(g), fluence_.get());
      PD_CUDA_CHECK_LAUNCH("spread_kernel");
      spot_boxes_kernel<<<blocks_for(spot_count), kThreads, 0, stream_>>>(
          pack.spots.get() + spot_begin, static_cast<unsigned>(spot_count), static_cast<int>(first_layer),
          device_sigma_px, cutoff_sigmas, SpotPixels(g), fluence_boxes_.get());
      PD_CUDA_CHECK_LAUNCH("spot_boxes_kernel");
    }
  }

  /// Pixels a spot of width sigma_px reaches along one axis, at most
  /// (kernels::spot_axis_range: floor and ceil of c ∓ n_σ·σ).
  static int spot_box_px(double sigma_px, double cutoff_sigmas) {
    return sigma_px <= 0.0 ? 1 : static_cast<int>(std::ceil(2.0 * cutoff_sigmas * sigma_px)) + 2;
  }

  void resample_into_beam(const BevGeometry& g, const float* bev, const kernels::Affine3& beam_from_out_index,
                          cudaStream_t stream) {
    const std::size_t n = og_.voxel_count();
    resample_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        g, bev, beam_from_out_index, kernels::VoxelIndexer(og_.size[0], og_.size[1], og_.size[2]), n, beam_.get());
    PD_CUDA_CHECK_LAUNCH("resample_kernel");
  }

  /// The group's LayerTables, packed into upload_staging_ for its mirror
  /// (stage_mirror_): pointers into the staged curves and WEPL tables
  /// (stage_beam_layers), into the fluence planes, and into its in-air σ,
  /// packed beside them (they depend on the group's slices).
  /// The group's tables (its layers from the beam's first_layer on), their
  /// fluence at fluence_'s planes from fluence_first_layer on.
  const kernels::LayerTables<float>* pack_layer_tables(const std::vector<HostLayerTables>& layers,
                                                       std::size_t first_layer, std::size_t fluence_first_layer,
                                                       std::size_t plane) {
    std::size_t floats = 0;
    std::vector<std::size_t> air_x(layers.size()), air_y(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      air_x[i] = floats;
      floats += layers[i].air_sigma_x_mm->size();
      air_y[i] = floats;
      floats += layers[i].air_sigma_y_mm->size();
    }
    float* air_pack = upload_staging_.take<float>(floats);
    for (std::size_t i = 0; i < layers.size(); ++i) {
      std::copy(layers[i].air_sigma_x_mm->begin(), layers[i].air_sigma_x_mm->end(), air_pack + air_x[i]);  // double → float
      std::copy(layers[i].air_sigma_y_mm->begin(), layers[i].air_sigma_y_mm->end(), air_pack + air_y[i]);
    }
    const BeamPack& pack = *beam_packs_.front();
    const double* base = pack.doubles.get();
    const float* float_base = pack.floats.get();
    const float* air_base = upload_staging_.in_mirror(stage_mirror_.get(), air_pack);
    kernels::LayerTables<float>* tables = upload_staging_.take<kernels::LayerTables<float>>(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const StagedLayer& o = pack.layers[first_layer + i];
      kernels::LayerTables<float> t{};
      static_cast<kernels::LayerScalars&>(t) = layers[i].scalars;
      t.fluence = fluence_.get() + (fluence_first_layer + i) * plane;
      t.curve = reinterpret_cast<const kernels::CurveNode*>(base + o.curve);
      t.curve_nodes = o.curve_nodes;
      t.energy_mev = float_base + o.energy;
      t.scattering_factor = float_base + o.scattering;
      t.halo_weight = o.has_halo ? float_base + o.halo_weight : nullptr;
      t.halo_sigma_mm = o.has_halo ? float_base + o.halo_sigma : nullptr;
      t.wepl_nodes = o.wepl_nodes;
      t.air_sigma_x_mm = air_base + air_x[i];
      t.air_sigma_y_mm = air_base + air_y[i];
      tables[i] = t;
    }
    return tables;
  }

  int device_;
  DeviceSuperposer superposer_;
  DeviceBuffer<unsigned long long> slice_summary_;  ///< the last layer_images' stack summary (SliceSummaryWriter)
  DeviceBuffer<unsigned long long> halo_slice_summary_;  ///< the last bin_halo's coarse stack summary
  DeviceSuperposer halo_superposer_;  ///< the halo's, so that it can run alongside superposer_
  /// A prepared CT in device memory.
  struct PatientBuffers {
    std::uint64_t id = 0;
    DeviceBuffer<float> rsp, density, out_rsp, out_density;  ///< out_*: unallocated when the output grid is the CT's
    const float* output_rsp() const { return out_rsp.capacity() ? out_rsp.get() : rsp.get(); }
    const float* output_density() const { return out_density.capacity() ? out_density.get() : density.get(); }
    DeviceBuffer<double> inverse_length;
  };
  static constexpr std::size_t kCachedPatients = 4;
  const PatientVolumes* patient_ = nullptr;
  std::vector<std::unique_ptr<PatientBuffers>> patients_;  ///< most recently used first
  PatientBuffers* current_ = nullptr;
  Grid3 og_;
  std::size_t bev_pixels_ = 0;
  bool bev_cleared_ = true;  ///< bev_ zeroed since begin_bev (clear_bev)
  /// The plan scaled and checked by the last beam's finish_beam: its scale and summary.
  std::optional<std::pair<double, PlanDoseSummary>> finished_plan_;
  int* trace_back_ = nullptr;   ///< pinned (upload_staging_): the last start_trace's read-back, until trace_summary
  std::size_t trace_cutoffs_ = 0;  ///< its cut-offs
  bool beam_holds_dose_ = false;  ///< beam_ holds an earlier layer group's halo dose (else finish_beam writes it anew)
  bool plan_holds_dose_ = false;  ///< plan_ holds the plan's dose (else no beam has finished since begin_plan)
  std::optional<BevGeometry> pending_halo_;  ///< the grid of the halo dose in halo_bev_ that finish_beam adds
  PinnedStaging upload_staging_;  ///< layer_images' uploads
  PinnedStaging beam_staging_;    ///< stage_beam_layers' uploads
  std::size_t trace_pixels_ = 0;  ///< the last trace's (start_trace)
  int halo_column_bin_ = 1;       ///< the last layer images' (LayerStackArgs::halo_column_bin)
  /// The beams kept in device memory, the one staged last (the current beam) first.
  std::vector<std::unique_ptr<BeamPack>> beam_packs_;
  bool beam_staged_ = false;  ///< stage_beam_layers came after the last start_trace
  /// spread_beam_fluence came after the last start_trace: fluence_ and
  /// fluence_boxes_ hold every layer of the beam, spread on spread_grid_'s
  /// rays with spread_sigma_iso_mm_ and spread_cutoff_sigmas_.
  bool fluence_spread_ = false;
  BevGeometry spread_grid_{};
  std::vector<double> spread_sigma_iso_mm_;
  double spread_cutoff_sigmas_ = 0;
  PinnedStaging spread_staging_;           ///< spread_beam_fluence's σ upload
  DeviceBuffer<double> spread_sigma_px_;   ///< [beam layer][x, y] (spread_beam_fluence)
  cudaEvent_t trace_read_back_ = nullptr;  ///< start_trace's read-back of its summary has landed
  cudaEvent_t layer_sums_back_ = nullptr;  ///< layer_images' sums have landed in pinned_->layer_back
  /// layer_images' work is done on the GPU (its layer kernel, the groups'
  /// uploads): what start_halo's binning waits for.
  cudaEvent_t layer_images_done_ = nullptr;
  cudaEvent_t stream_fork_ = nullptr;        ///< stream_'s work so far, for beside_stream_ to wait for (fork_beside)
  cudaEvent_t bev_cleared_event_ = nullptr;  ///< layer_images' clearing of the BEV in beside_stream_ is done
  std::mutex device_marks_mutex_;  ///< device_mark: the halo's thread marks too
  std::vector<cudaEvent_t> device_mark_events_;                    ///< the pool, grown as needed
  std::vector<std::pair<const char*, cudaEvent_t>> device_marks_;  ///< this computation's, in order
  double device_marks_anchor_us_ = 0;
  StagedPacks staged_packs_{};                ///< where stage_beam_layers packs
  std::future<void> staged_spot_packing_;     ///< the staging threads' packing, until upload_staged_layers
  std::future<void> staged_table_packing_;
  DeviceBuffer<float> plan_, beam_;
  DeviceBuffer<double> doubles_;
  DeviceBuffer<double> segment_wet_;  ///< [segment][ray] (start_trace)
  /// The device mirror of what layer_images packs into upload_staging_ (one copy).
  DeviceBuffer<char> stage_mirror_;
  DeviceBuffer<float> trace_rsp_, trace_density_, wepl_far_, rho_over_x_, step_;
  DeviceBuffer<float> bev_, image_, sigma_x_, sigma_y_, stack_out_, halo_in_, halo_bev_;
  /// The layer images' halo: column sums of the shares and of the shares
  /// times their variances (ColumnBinnedHaloStore).
  DeviceBuffer<double> halo_share_sum_, halo_weighted_sum_;
  DeviceBuffer<int> ints_, depth_slice_;
  DeviceBuffer<char> sums_;
  DeviceBuffer<double> fluence_;
  DeviceBuffer<FluenceBoxSum> fluence_boxes_;  ///< [layer of the group] (spot_boxes_kernel)
  /// The stack's and the coarse halo stack's SliceBoxes (layer_kernel, halo_bin_kernel).
  DeviceBuffer<SliceBox> slice_boxes_, halo_slice_boxes_;
  std::size_t spread_shared_bytes_ = 48 * 1024;  ///< spread_kernel's dynamic shared-memory limit
  cudaStream_t stream_ = nullptr;  ///< every copy and kernel of the executor (the superposer has its own)
  cudaStream_t halo_stream_ = nullptr;  ///< the halo's (run_halo), alongside the stack's superposition
  /// Side work beside stream_ at a lower priority: the BEV's clearing beside
  /// the layer kernel (clear_bev_beside). It forks from stream_ through
  /// stream_fork_ and joins it through bev_cleared_event_.
  cudaStream_t beside_stream_ = nullptr;
  std::future<void> halo_run_;  ///< the halo's thread (spawn_halo_thread, std::async): joined by get()
  /// Its result, set before it exits: the halo's seconds, or nothing when it got no job.
  std::future<std::optional<double>> halo_result_;
  std::promise<std::optional<HaloJob>> halo_job_;  ///< what the waiting thread gets from start_halo
  bool halo_job_pending_ = false;                  ///< a thread waits for halo_job_
  std::future<Volume<float>> plan_host_;  ///< the plan dose's host volume, made during the computation
  static constexpr std::size_t kStagingBytes = std::size_t{8} << 20;
  void* download_staging_[2] = {nullptr, nullptr};      ///< pinned download ring (download())
  cudaEvent_t download_staged_[2] = {nullptr, nullptr};  ///< a chunk has landed in download_staging_[b]
  DeviceBuffer<int> group_begin_, group_members_;  ///< the stack's depth groups (stage_stack_groups)
  PinnedStaging group_staging_;                    ///< stage_stack_groups' uploads
  std::size_t groups_stack_slices_ = 0;            ///< the stack the staged groups describe
  int groups_bev_slices_ = -1;
  DeviceBuffer<float> halo_stack_out_;  ///< the halo's superposition output (run_halo)
  // Last, so that they join first on destruction, while what their tasks
  // use still exists: the plan dose's host volume (start_plan_host_volume)
  // and the packing of the beam's layers (stage_beam_layers), each on a
  // thread kept for the executor's lifetime. Host work only: no CUDA call.
  TaskThread plan_host_thread_, staging_thread_, table_staging_thread_;
};

}  // namespace

std::unique_ptr<BeamExecutor> make_gpu_beam_executor(SuperpositionMethod method, const SuperpositionOptions& options) {
  return std::make_unique<GpuBeamExecutor>(method, options);
}

}  // namespace protondose::engine
