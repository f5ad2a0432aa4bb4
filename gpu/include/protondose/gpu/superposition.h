#pragma once
/// \file superposition.h
/// Gaussian kernel superposition (KS) of stacks of 2D slices — the core of the
/// dose engine (da Silva, Ansorge & Jena, "Efficient scatter-based kernel
/// superposition on GPU", shared/papers/scatter-kernel-superposition-on-gpu.md).
///
/// For every slice s and output pixel (y, x):
///
///   O[s][y][x] = Σ_{y',x'} I[s][y'][x'] · K(x − x', σx[s][y'][x']) · K(y − y', σy[s][y'][x'])
///
/// with the pixel-integrated Gaussian (the paper's Eq. 4)
///
///   K(d, σ) = ½ [erf((d + ½)/(√2 σ)) − erf((d − ½)/(√2 σ))],  |d| ≤ r,  0 beyond,
///
/// where r = ceil(n_σ · σ) is the cut-off radius of the *input* pixel along that
/// axis (evaluated in float, identically on every backend), and σ = 0 means the
/// pixel deposits locally (K(0) = 1). The weights are not renormalised: a pixel's
/// weights sum to 1 minus the Gaussian tail beyond its cut-off.
///
/// Output grid: the same size as the input, **clipped** — contributions that
/// would land outside the slice are dropped. Callers that must conserve energy
/// pad their grid by the largest radius (the dose engine's BEV grid covers every
/// spot ± n_σ·σ).
///
/// Layout of every array: [slice][row][col], col fastest; rows are "y", cols "x".
/// No CUDA type appears here; in a build without CUDA the GPU methods throw
/// UnavailableError.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace protondose {

/// Size of a stack of 2D slices.
struct StackShape {
  int slices = 0;
  int rows = 0;  ///< y extent
  int cols = 0;  ///< x extent
  std::size_t pixel_count() const {
    return static_cast<std::size_t>(slices) * static_cast<std::size_t>(rows) *
           static_cast<std::size_t>(cols);
  }
};

/// A read-only array with its length (host or device memory, as the call says).
struct ConstFloatSpan {
  const float* data = nullptr;
  std::size_t size = 0;
};

/// Where a slice may hold non-zero pixels: columns [col_begin, col_end) ×
/// rows [row_begin, row_end) (SuperpositionInput::slice_box). Clipped to the
/// slice; begin ≥ end on either axis: an all-zero slice.
struct SliceBox {
  int col_begin = 0, col_end = 0;
  int row_begin = 0, row_end = 0;
};

/// Input of one superposition: image ≥ 0 and per-pixel Gaussian widths in pixel
/// units along x (cols) and y (rows), each shape.pixel_count() long.
struct SuperpositionInput {
  StackShape shape;
  ConstFloatSpan image;       ///< I[s][y][x] ≥ 0 (energy per pixel, any unit)
  ConstFloatSpan sigma_x_px;  ///< σx[s][y][x] ≥ 0, pixels along x
  ConstFloatSpan sigma_y_px;  ///< σy[s][y][x] ≥ 0, pixels along y
  /// Optional, device calls only (DeviceSuperposer::superpose_device): what
  /// the stack's producer found while writing it, so that the analysis pass
  /// (a read of the whole stack) can leave out the slices whose summary says
  /// all it needs — empty slices, and uniform-σ slices that run as separable
  /// passes. Device memory, kSliceSummaryFields × slices 64-bit words,
  /// field-major (entry f·slices + s). Over the slice's pixels with image > 0,
  /// with key = bits(σx) << 32 | bits(σy) (non-negative floats order as their
  /// bits): the smallest key, the largest key, and the bits of the largest
  /// image value. An empty slice: ~0 and 0 (and 0). A slice with an invalid
  /// pixel (NaN, Inf or negative image or σ, image 0 included) must read 0
  /// and ~0 — and so may any non-uniform slice: it is then analysed like any
  /// other (and the pixel reported). The result does not change with or
  /// without a summary (tests/gpu/slice_summary_gpu_test.cpp).
  /// Superposer::superpose (host arrays) ignores it: it copies only the three
  /// arrays to the device.
  const unsigned long long* slice_summary = nullptr;
  /// Optional, device calls only: one SliceBox per slice (device memory),
  /// the producer's promise that every pixel of the slice outside its box
  /// has image 0. No method reads a pixel outside the box (image or σ): the
  /// producer need not write them, and the result is bitwise what it is
  /// with zeros there and without boxes (tests/gpu/slice_box_gpu_test.cpp).
  /// The engine's boxes are the layers' spot-fluence footprints, inside a
  /// margin of n_σ·σ that the grid keeps around them; its layer kernel
  /// writes nothing outside them. A wrong promise gives a wrong result, and
  /// an invalid pixel outside the box goes unreported: checking would read
  /// what the box spares.
  /// Superposer::superpose (host arrays) ignores it.
  const SliceBox* slice_box = nullptr;
  /// Optional, device calls only: the output's slices summed in groups, for
  /// a caller that adds slices together anyway (the engine: the layers'
  /// slices at each depth). Group g's plane, out[g], gets the output slices
  /// member_slices[member_begin[g]] … [member_begin[g + 1] − 1] added to it,
  /// one after another in that order, in float — bitwise what adding the
  /// ungrouped output's slices to it would give. The uniform-σ slices are
  /// then summed in their column pass and written nowhere else: d_output is
  /// scratch, its contents unspecified afterwards. Superposer::superpose
  /// (host arrays) refuses groups.
  struct SliceGroups {
    int count = 0;                        ///< groups (0: none)
    const int* member_begin = nullptr;    ///< device, count + 1 offsets into member_slices
    const int* member_slices = nullptr;   ///< device, stack slices, each in at most one group
    float* out = nullptr;                 ///< device, count × rows × cols: added into
  };
  SliceGroups groups = {};
};

/// Fields of SuperpositionInput::slice_summary, in their order.
enum SliceSummaryField : int { kSummaryMinSigmaKey, kSummaryMaxSigmaKey, kSummaryMaxImage, kSliceSummaryFields };

/// Largest kernel radius (pixels) any path accepts; larger σ is rejected as input error.
inline constexpr int kMaxKernelRadiusPx = 256;
/// Largest radius handled by the shared-memory tile scatter; tiles whose
/// radius exceeds it go to the general path (global-atomics scatter).
inline constexpr int kMaxTileRadiusPx = 32;

/// kGpuScatterTensorCore's default crossover radius (pixels): buckets of
/// smaller radius run on the tile scatter (SuperpositionOptions::tensor_core_min_radius_px).
/// Measured on an H100, 64 × 512², every tile at fixed r (docs/benchmarks.md
/// run 44, 2026-11-26, radius classes of 4 px): tensor cores / tile scatter =
/// 1.11 at r 1, 0.84 at 2, 0.67 at 3, 0.55 at 4, 0.36 at 8 (run 24, classes
/// of 8 px: 1.35 at r 1, 1.02 at 2, 0.83 at 3; the kernel of 2026-11-24:
/// 1.22 at r 4, 1.01 at 5, 0.82 at 6).
inline constexpr int kTensorCoreMinRadiusPx = 2;

/// Who launches the per-radius grids of the tiled scatter (kGpuScatterTiled).
/// Measured on an H100 (docs/benchmarks.md), the same tile kernels run about
/// 1.8× slower when launched from the device than from the host, so the
/// default pays one small read-back of the bucket sizes per stack (never per
/// slice) and launches from the host.
enum class TileDispatch {
  kFromHost,    ///< the host reads the 34 bucket sizes back, once per stack, and launches them
  kFromDevice,  ///< a dispatcher kernel launches them (dynamic parallelism): no host round trip
};

struct SuperpositionOptions {
  double cutoff_sigmas = 3.0;  ///< n_σ: kernel radius r = ceil(n_σ·σ), in (0, 10]
  /// Bitwise-reproducible output from run to run (fixed-point accumulation of
  /// the tile flushes); costs some time, measured in docs/benchmarks.md.
  bool deterministic = false;
  int cpu_threads = 0;  ///< CPU reference: worker threads (0 = default_thread_count())
  TileDispatch tile_dispatch = TileDispatch::kFromHost;  ///< tiled scatter only
  /// GPU methods: the CUDA device (index) to run on. Every call makes it the
  /// calling thread's current device, so workers on different devices can
  /// share a process. An index with no device is an UnavailableError.
  int gpu_device = 0;
  /// GPU scatter methods (tiled and register-blocked, buckets launched from the
  /// host): a slice whose non-zero pixels all share one σx and one σy is a true
  /// convolution, and runs as the separable row and column passes instead of
  /// the tile scatter — the same sum, since the scatter's weight K(dx,σx)·K(dy,σy)
  /// is a product with each axis cut at its own radius: 2(2r+1) instead of
  /// (2r+1)² taps per pixel. Homogeneous water with a parallel beam gives such
  /// slices; heterogeneous patients rarely do. False forces the scatter (for
  /// the benchmark's comparisons).
  bool separable_uniform_slices = true;
  /// kGpuScatterTensorCore: bucket radii from this value up to
  /// kMaxTileRadiusPx run on the tensor cores, smaller ones on the paper's
  /// tile scatter (where the tensor-core tiles would be mostly zeros). The
  /// default is the crossover measured on an H100 (docs/ks-core.md); 1 sends
  /// every radius to the tensor cores (tests, benchmark).
  int tensor_core_min_radius_px = kTensorCoreMinRadiusPx;
  /// GPU methods: the superposer's streams at the device's greatest priority,
  /// so that the blocks of its kernels are scheduled before those of
  /// default-priority streams as soon as SMs free up. The engine gives it to
  /// the nuclear halo's superposer, whose small kernels otherwise queued
  /// behind the core's passes and ran after them as the stage's tail.
  bool high_priority_streams = false;
};

/// The implementations, named by what differs. All compute the same sum.
enum class SuperpositionMethod {
  kCpuReference,       ///< double precision scatter on the CPU: the oracle, and the no-GPU path
  kGpuGatherExact,     ///< one thread per output pixel, erf per neighbour (paper's naive gather)
  kGpuScatterAtomic,   ///< one thread per input pixel, global atomics per tap (paper's lower bound)
  kGpuScatterTiled,    ///< shared-memory tile scatter, r templated, tiles bucketed by r on the device
  /// One warp per tile; each thread sums a strip of pixels' contributions to a
  /// column in registers before one shared-memory update per cell (fewer
  /// shared-memory read-modify-writes than taps); same buckets as the tiled
  /// scatter. Exact, but measured 0.62–1.05× the tiled scatter on an H100
  /// (docs/ks-core.md), so the engine does not use it.
  kGpuScatterRegisterBlocked,
  /// The scatter as matrix products on the tensor cores: for each source row
  /// of a tile, the contributions of 8 pixels to a block of 16 output rows ×
  /// 8 output columns are the product of a 16 × 8 matrix of value × vertical
  /// weights and an 8 × 8 matrix of horizontal weights (mma.sync m16n8k8, TF32
  /// operands split into high and low parts, three products per block: float
  /// accuracy).
  /// Same buckets as the tiled scatter; radii below
  /// SuperpositionOptions::tensor_core_min_radius_px run on the tile scatter.
  kGpuScatterTensorCore,
};

/// Stable lowercase name ("cpu-reference", "gpu-gather-exact", ...).
const char* method_name(SuperpositionMethod method);

/// Throws InputError when the input is unusable: sizes that do not match the
/// shape, an empty stack, a negative/NaN/Inf image value or σ (naming slice,
/// row, col and value), σ whose radius exceeds kMaxKernelRadiusPx, or
/// cutoff_sigmas outside (0, 10]. Host memory only.
void validate_superposition_input(const SuperpositionInput& input,
                                  const SuperpositionOptions& options);

/// Kernel radius (pixels) of a pixel of width sigma_px: ceil(n_σ·σ) in float.
int kernel_radius_px(float sigma_px, float cutoff_sigmas);

/// One implementation behind the common interface.
class Superposer {
 public:
  virtual ~Superposer() = default;
  virtual SuperpositionMethod method() const = 0;
  /// Superposes host arrays; `output` must hold input.shape.pixel_count()
  /// floats and is overwritten. Validates the input first (InputError).
  virtual void superpose(const SuperpositionInput& input, float* output) = 0;
};

/// Creates an implementation. GPU methods throw UnavailableError when protondose
/// was built without CUDA or no CUDA device is present (never a CPU fallback).
std::unique_ptr<Superposer> make_superposer(SuperpositionMethod method,
                                            const SuperpositionOptions& options = {});

/// The CPU oracle in double precision (what kCpuReference wraps, before its
/// final rounding to float). Multi-threaded over slices or row bands;
/// the result does not depend on the thread count.
std::vector<double> superpose_cpu_reference(const SuperpositionInput& input,
                                            const SuperpositionOptions& options = {});

}  // namespace protondose
