#pragma once
/// \file device_superposition.h
/// Kernel superposition on arrays that already live in GPU memory — the entry
/// point of the dose engine, which keeps its stacks on the device. No CUDA
/// types: device pointers are plain pointers obtained from the gpu module.

#include <memory>
#include <string>

#include "protondose/gpu/superposition.h"

namespace protondose {

/// True when protondose was compiled with its CUDA kernels.
bool built_with_cuda();

/// Number of usable CUDA devices: 0 when built without CUDA or when the driver
/// reports none. Never throws for "no device".
int gpu_device_count();

/// What the benchmark and logs report about a device.
struct GpuDeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0, compute_capability_minor = 0;
  int multiprocessor_count = 0;
  double sm_clock_mhz = 0.0;
  std::size_t global_memory_bytes = 0;
  std::size_t shared_memory_per_multiprocessor_bytes = 0;
};

/// Properties of device `index`; UnavailableError if there is no such device.
GpuDeviceInfo gpu_device_info(int index = 0);

/// What initialize_gpu_device took (seconds).
struct GpuStartTimings {
  double context_s = 0;  ///< the CUDA context (first runtime call on the device)
  double kernels_s = 0;  ///< loading and configuring the superposition kernels
};

/// Makes device `index` the calling thread's current device and starts its
/// CUDA context and the superposition kernels' configuration now, so that a
/// worker can do it while other work runs rather than inside its first
/// computation. UnavailableError without CUDA or without that device.
GpuStartTimings initialize_gpu_device(int index);

/// Free memory of CUDA device `index` now (bytes), for sizing work up front;
/// UnavailableError without CUDA or without that device.
std::size_t gpu_free_memory_bytes(int index = 0);

/// Device bytes the GPU superposition needs per stack pixel: image, σx, σy and
/// output floats, the deterministic mode's 64-bit accumulator, and the row-pass
/// intermediate of uniform-σ slices (SuperpositionOptions::separable_uniform_slices).
inline constexpr std::size_t kGpuSuperpositionBytesPerPixel =
    4 * sizeof(float) + sizeof(unsigned long long) + sizeof(float);

/// Runs one GPU superposition method on device arrays. Holds its scratch
/// memory and stream between calls (grow-only), so repeated calls allocate
/// nothing. Not thread-safe: one instance per host thread.
class DeviceSuperposer {
 public:
  /// method must be a GPU method; throws UnavailableError without CUDA or device.
  DeviceSuperposer(SuperpositionMethod method, const SuperpositionOptions& options = {});
  ~DeviceSuperposer();
  DeviceSuperposer(const DeviceSuperposer&) = delete;
  DeviceSuperposer& operator=(const DeviceSuperposer&) = delete;

  /// Superposes device arrays into d_output (device, pixel_count floats,
  /// overwritten), then waits for the result. Invalid pixels (negative, NaN or
  /// Inf values or σ, radius > kMaxKernelRadiusPx) are detected on the device
  /// and reported as InputError naming the first such pixel.
  void superpose_device(const SuperpositionInput& device_input, float* d_output);

  /// Queues the first half of superpose_device(device_input, d_output) — the
  /// stack's analysis and the read-back of its bucket counts — behind the
  /// work queued so far on `producer_stream` (a cudaStream_t of the
  /// superposer's device, which makes the arrays), and returns without
  /// waiting. The next superpose_device with the same arrays and output then
  /// goes on from there: the caller must not change the arrays in between;
  /// a call with other arrays analyses its own. For a producer whose host
  /// has other work before the superposition (the engine: the halo's grid
  /// after the layer images), the GPU analyses meanwhile. Only the
  /// host-launched scatter paths have that split; for the others it does
  /// nothing. InputError as superpose_device for a malformed request.
  void queue_analysis(const SuperpositionInput& device_input, float* d_output, void* producer_stream);

  SuperpositionMethod method() const;

  /// How the last superpose_device call split its stack (host-launched scatter
  /// paths; zeros for the others): slices run as separable passes because
  /// their σ is uniform, and tiles run by the scatter.
  struct Split {
    int separable_slices = 0;
    int scatter_tiles = 0;
  };
  Split last_split() const;

  /// Device memory helpers for callers without CUDA headers (tests, engine).
  /// Allocates on CUDA device `device` (and makes it the calling thread's
  /// current device): memory of another device than the superposer's would be
  /// an illegal address for its kernels.
  static float* allocate_device_floats(std::size_t count, int device = 0);
  static void free_device(void* d_pointer);
  /// Returns once the data is in device memory (a pageable cudaMemcpy alone
  /// may return before its DMA lands, and the superposer's stream would not wait for it).
  static void copy_to_device(float* d_destination, const float* h_source, std::size_t count);
  static void copy_to_host(float* h_destination, const float* d_source, std::size_t count);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace protondose
