// Host side of the GPU superposition: validation of the request, scratch
// management, the launch sequence per method, and the device-side error check.
#include <cuda_runtime.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <vector>

#include "../backends.h"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/gpu/cuda/stream_priority.cuh"
#include "protondose/core/error.h"
#include "protondose/core/host_timeline.h"
#include "protondose/gpu/device_superposition.h"
#include "superposition_kernels.cuh"

namespace protondose {

bool built_with_cuda() { return true; }

int gpu_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

GpuDeviceInfo gpu_device_info(int index) {
  if (index < 0 || index >= gpu_device_count())
    throw UnavailableError("CUDA device " + std::to_string(index) + " does not exist (" +
                           std::to_string(gpu_device_count()) + " device(s) present)");
  cudaDeviceProp prop{};
  PD_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  int clock_khz = 0;
  PD_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index));
  GpuDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.compute_capability_major = prop.major;
  info.compute_capability_minor = prop.minor;
  info.multiprocessor_count = prop.multiProcessorCount;
  info.sm_clock_mhz = clock_khz / 1000.0;
  info.global_memory_bytes = prop.totalGlobalMem;
  info.shared_memory_per_multiprocessor_bytes = prop.sharedMemPerMultiprocessor;
  return info;
}

namespace {

/// Makes `index` the calling thread's current device; UnavailableError naming
/// it when there is no such device.
void use_device(int index, const std::string& what) {
  const int count = gpu_device_count();
  if (index < 0 || index >= count)
    throw UnavailableError(what + ": CUDA device " + std::to_string(index) + " does not exist (" +
                           std::to_string(count) + " device(s) present)");
  PD_CUDA_CHECK(cudaSetDevice(index));
}

}  // namespace

GpuStartTimings initialize_gpu_device(int index) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  use_device(index, "initialize_gpu_device");
  PD_CUDA_CHECK(cudaFree(nullptr));  // creates the context
  const auto t1 = Clock::now();
  cuda::prepare_tile_kernels();      // loads and configures the tile kernels
  cuda::prepare_tensor_core_kernels();
  GpuStartTimings t;
  t.context_s = std::chrono::duration<double>(t1 - t0).count();
  t.kernels_s = std::chrono::duration<double>(Clock::now() - t1).count();
  return t;
}

std::size_t gpu_free_memory_bytes(int index) {
  use_device(index, "gpu_free_memory_bytes");
  std::size_t free_bytes = 0, total_bytes = 0;
  PD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

struct DeviceSuperposer::Impl {
  SuperpositionMethod method;
  SuperpositionOptions options;
  cudaStream_t stream = nullptr;
  cuda::DeviceBuffer<unsigned char> scratch;
  cuda::DeviceBuffer<unsigned long long> fixed;
  cuda::SeparableScratch separable_scratch;  ///< row-pass intermediate of the uniform-σ slices
  /// Side streams of the host-launched buckets (made on the superposer's
  /// device in the constructor, after `stream`).
  std::unique_ptr<cuda::BucketDispatch> bucket_dispatch;
  DeviceSuperposer::Split last_split;

  ~Impl() {
    if (producer_done) cudaEventDestroy(producer_done);
    if (stream) cudaStreamDestroy(stream);
  }

  /// What queue_analysis queued, for the superpose_device call of the same arrays.
  struct Queued {
    SuperpositionInput input;
    float* out = nullptr;
    cuda::StackParams p;
    cuda::StackAnalysis a;
  };
  std::optional<Queued> queued;
  cudaEvent_t producer_done = nullptr;  ///< queue_analysis: the producer's work so far (made at first use)

  bool host_buckets() const {
    return method == SuperpositionMethod::kGpuScatterRegisterBlocked ||
           method == SuperpositionMethod::kGpuScatterTensorCore ||
           (method == SuperpositionMethod::kGpuScatterTiled && options.tile_dispatch == TileDispatch::kFromHost);
  }

  static bool same_arrays(const SuperpositionInput& x, const SuperpositionInput& y) {
    return x.shape.slices == y.shape.slices && x.shape.rows == y.shape.rows && x.shape.cols == y.shape.cols &&
           x.image.data == y.image.data && x.sigma_x_px.data == y.sigma_x_px.data &&
           x.sigma_y_px.data == y.sigma_y_px.data && x.slice_summary == y.slice_summary &&
           x.slice_box == y.slice_box && x.groups.count == y.groups.count &&
           x.groups.member_begin == y.groups.member_begin && x.groups.member_slices == y.groups.member_slices &&
           x.groups.out == y.groups.out;
  }

  /// The request checked and its parameters and analysis laid out (scratch
  /// reserved); nothing queued.
  void lay_out(const SuperpositionInput& in, float* d_out, cuda::StackParams& p, cuda::StackAnalysis& a) {
    const StackShape& shape = in.shape;
    if (shape.slices <= 0 || shape.rows <= 0 || shape.cols <= 0)
      throw InputError("superposition: empty stack shape");
    for (const ConstFloatSpan* span : {&in.image, &in.sigma_x_px, &in.sigma_y_px})
      if (span->data == nullptr || span->size != shape.pixel_count())
        throw InputError("superposition: a device array is missing or its size does not match the stack");

    p = cuda::StackParams{};
    p.slices = shape.slices;
    p.rows = shape.rows;
    p.cols = shape.cols;
    p.tiles_x = (shape.cols + cuda::kTileCols - 1) / cuda::kTileCols;
    p.tiles_y = (shape.rows + cuda::kTileRows - 1) / cuda::kTileRows;
    p.cutoff_sigmas = static_cast<float>(options.cutoff_sigmas);
    p.image = in.image.data;
    p.sigma_x = in.sigma_x_px.data;
    p.sigma_y = in.sigma_y_px.data;
    p.out = d_out;
    // Uniform-σ slices take the separable passes on the host-launched scatter
    // paths (the device-side dispatcher launches tile buckets only).
    p.separable_uniform_slices = options.separable_uniform_slices && host_buckets();
    p.slice_summary = in.slice_summary;
    p.slice_box = in.slice_box;
    if (in.groups.count < 0 ||
        (in.groups.count > 0 && (!in.groups.member_begin || !in.groups.member_slices || !in.groups.out)))
      throw InputError("superposition: slice groups need their offsets, member slices and output (device arrays)");
    p.groups = in.groups;

    scratch.reserve(cuda::analysis_bytes(p));
    a = cuda::analysis_layout(p, scratch.get());
    p.fixed_scale = a.fixed_scale;
    if (options.deterministic && method != SuperpositionMethod::kGpuGatherExact) {
      fixed.reserve(shape.pixel_count());
      p.out_fixed = fixed.get();
    }
  }

  void queue_analysis(const SuperpositionInput& in, float* d_out, cudaStream_t producer) {
    PD_CUDA_CHECK(cudaSetDevice(options.gpu_device));
    queued.reset();
    bucket_dispatch->drop_queued_counts();
    if (!host_buckets()) return;  // the others analyse and launch in one go (superpose_device)
    Queued q;
    lay_out(in, d_out, q.p, q.a);
    if (!producer_done) PD_CUDA_CHECK(cudaEventCreateWithFlags(&producer_done, cudaEventDisableTiming));
    PD_CUDA_CHECK(cudaEventRecord(producer_done, producer));
    PD_CUDA_CHECK(cudaStreamWaitEvent(stream, producer_done, 0));
    cuda::launch_analyse(q.p, q.a, stream);
    bucket_dispatch->queue_counts(q.p, q.a, stream);
    HostTimeline::mark("superposer: analysis queued");
    q.input = in;
    q.out = d_out;
    queued = q;
  }

  void run(const SuperpositionInput& in, float* d_out) {
    PD_CUDA_CHECK(cudaSetDevice(options.gpu_device));
    cuda::StackParams p;
    cuda::StackAnalysis a;
    const bool analysed = queued && queued->out == d_out && same_arrays(queued->input, in);
    if (analysed) {
      p = queued->p;
      a = queued->a;
    } else {
      bucket_dispatch->drop_queued_counts();
      lay_out(in, d_out, p, a);
    }
    queued.reset();
    const std::size_t count = in.shape.pixel_count();
    const bool scatter = method != SuperpositionMethod::kGpuGatherExact;
    const bool host_launched = host_buckets();
    // An analysis run here, of every slice, clears the output as it reads
    // the stack (StackParams::clear_output_in_analysis); one queued ahead
    // ran while the output could still be another's.
    p.clear_output_in_analysis = host_launched && !analysed && in.slice_summary == nullptr;
    // The host-launched bucket paths clear the output themselves once they
    // know which slices run as separable passes (those need no clearing).
    if (!host_launched) {
      if (options.deterministic && scatter)
        PD_CUDA_CHECK(cudaMemsetAsync(p.out_fixed, 0, count * sizeof(unsigned long long), stream));
      else
        PD_CUDA_CHECK(cudaMemsetAsync(d_out, 0, count * sizeof(float), stream));
    }

    if (analysed) {
      HostTimeline::mark("superposer: queued analysis taken");
    } else {
      cuda::launch_analyse(p, a, stream);
      HostTimeline::mark("superposer: analysis launched");
    }
    cuda::DispatchCounts counts;
    switch (method) {
      case SuperpositionMethod::kGpuScatterTiled:
        counts = cuda::launch_scatter_tiled(p, a,
                                            options.tile_dispatch == TileDispatch::kFromDevice
                                                ? cuda::BucketLaunch::kFromDevice
                                                : cuda::BucketLaunch::kFromHost,
                                            separable_scratch, *bucket_dispatch, stream);
        break;
      case SuperpositionMethod::kGpuScatterRegisterBlocked:
        counts = cuda::launch_scatter_register_blocked(p, a, separable_scratch, *bucket_dispatch, stream);
        break;
      case SuperpositionMethod::kGpuScatterTensorCore:
        counts = cuda::launch_scatter_tensor_core(p, a, options.tensor_core_min_radius_px, separable_scratch,
                                                  *bucket_dispatch, stream);
        break;
      case SuperpositionMethod::kGpuScatterAtomic:
        cuda::launch_fixed_scale(p, a, stream);
        cuda::launch_scatter_atomic(p, stream);
        break;
      case SuperpositionMethod::kGpuGatherExact: cuda::launch_gather_exact(p, a, stream); break;
      case SuperpositionMethod::kCpuReference: throw InternalError("CPU method on the GPU runner");
    }
    if (p.out_fixed) cuda::launch_fixed_to_float(p, stream);
    if (p.groups.count > 0 && !counts.grouped) cuda::launch_group_sums(p, stream);
    last_split = {counts.uniform_slices, counts.scatter_tiles};

    unsigned long long first_invalid = 0;
    int device_launch_error = 0;
    PD_CUDA_CHECK(cudaMemcpyAsync(&first_invalid, a.first_invalid, sizeof(first_invalid),
                                  cudaMemcpyDeviceToHost, stream));
    const bool from_device = method == SuperpositionMethod::kGpuScatterTiled &&
                             options.tile_dispatch == TileDispatch::kFromDevice;
    if (from_device)
      PD_CUDA_CHECK(cudaMemcpyAsync(&device_launch_error, a.device_launch_error, sizeof(device_launch_error),
                                    cudaMemcpyDeviceToHost, stream));
    PD_CUDA_CHECK(cudaStreamSynchronize(stream));
    HostTimeline::mark("superposer: done");
    if (device_launch_error != 0)
      cuda::throw_cuda_error(static_cast<cudaError_t>(device_launch_error),
                             "a tile bucket's launch by the device-side dispatcher", __FILE__, __LINE__);
    if (first_invalid != ~0ull) report_invalid(in, first_invalid);
  }

  // Copies the offending pixel back to name it and its values.
  [[noreturn]] void report_invalid(const SuperpositionInput& in, unsigned long long index) {
    float values[3] = {};
    const float* sources[3] = {in.image.data, in.sigma_x_px.data, in.sigma_y_px.data};
    for (int k = 0; k < 3; ++k)
      PD_CUDA_CHECK(cudaMemcpy(values + k, sources[k] + index, sizeof(float), cudaMemcpyDeviceToHost));
    const std::size_t plane = static_cast<std::size_t>(in.shape.rows) * in.shape.cols;
    std::ostringstream m;
    m << "superposition: invalid pixel at slice " << index / plane << ", row "
      << (index % plane) / in.shape.cols << ", col " << index % in.shape.cols << ": image "
      << values[0] << ", sigma_x " << values[1] << " px, sigma_y " << values[2]
      << " px (image and sigma must be finite and >= 0, and the kernel radius at "
      << options.cutoff_sigmas << " sigma at most " << kMaxKernelRadiusPx << " px)";
    throw InputError(m.str());
  }
};

DeviceSuperposer::DeviceSuperposer(SuperpositionMethod method, const SuperpositionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (method == SuperpositionMethod::kCpuReference)
    throw ConfigError("DeviceSuperposer runs GPU methods only; use make_superposer for cpu-reference");
  if (gpu_device_count() == 0)
    throw UnavailableError(std::string("superposition method '") + method_name(method) +
                           "' needs a CUDA device, and none is present");
  if (!(options.cutoff_sigmas > 0.0 && options.cutoff_sigmas <= 10.0))
    throw InputError("superposition: cut-off " + std::to_string(options.cutoff_sigmas) +
                     " sigma is outside the accepted range (0, 10]");
  if (options.tensor_core_min_radius_px < 1)
    throw ConfigError("superposition: tensor_core_min_radius_px " + std::to_string(options.tensor_core_min_radius_px) +
                      " is below the accepted minimum 1 px");
  impl_->method = method;
  impl_->options = options;
  use_device(options.gpu_device, std::string("superposition method '") + method_name(method) + "'");
  const int priority = cuda::stream_priority(options.high_priority_streams ? cuda::StreamPriority::kGreatest
                                                                          : cuda::StreamPriority::kLeast);
  PD_CUDA_CHECK(cudaStreamCreateWithPriority(&impl_->stream, cudaStreamNonBlocking, priority));
  impl_->bucket_dispatch = std::make_unique<cuda::BucketDispatch>(priority);
}

DeviceSuperposer::~DeviceSuperposer() = default;

void DeviceSuperposer::superpose_device(const SuperpositionInput& device_input, float* d_output) {
  impl_->run(device_input, d_output);
}

void DeviceSuperposer::queue_analysis(const SuperpositionInput& device_input, float* d_output, void* producer_stream) {
  impl_->queue_analysis(device_input, d_output, static_cast<cudaStream_t>(producer_stream));
}

SuperpositionMethod DeviceSuperposer::method() const { return impl_->method; }

DeviceSuperposer::Split DeviceSuperposer::last_split() const { return impl_->last_split; }

float* DeviceSuperposer::allocate_device_floats(std::size_t count, int device) {
  use_device(device, "allocate_device_floats");
  float* d = nullptr;
  PD_CUDA_CHECK(cudaMalloc(&d, count * sizeof(float)));
  return d;
}
void DeviceSuperposer::free_device(void* d_pointer) {
  if (d_pointer) PD_CUDA_CHECK(cudaFree(d_pointer));
}
namespace {

/// cudaMemcpy from pageable host memory returns once the source is staged,
/// possibly before its DMA into device memory has landed; the superposer's
/// non-blocking stream does not wait for the legacy stream, so its first
/// kernels could read (or its memset be overwritten by) the old contents.
/// Seen on an H100 with four GPU test processes at once: a 1e30 "garbage"
/// output the tile scatter had cleared reappeared after the clear.
void copy_to_device_and_wait(void* d_destination, const void* h_source, std::size_t bytes) {
  PD_CUDA_CHECK(cudaMemcpy(d_destination, h_source, bytes, cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

}  // namespace

void DeviceSuperposer::copy_to_device(float* d_destination, const float* h_source, std::size_t count) {
  copy_to_device_and_wait(d_destination, h_source, count * sizeof(float));
}
void DeviceSuperposer::copy_to_host(float* h_destination, const float* d_source, std::size_t count) {
  PD_CUDA_CHECK(cudaMemcpy(h_destination, d_source, count * sizeof(float), cudaMemcpyDeviceToHost));
}

namespace {

/// Superposer on host arrays: validate on the host, copy in, run, copy out.
class HostArraysGpuSuperposer final : public Superposer {
 public:
  HostArraysGpuSuperposer(SuperpositionMethod method, const SuperpositionOptions& options)
      : options_(options), device_(method, options) {}
  SuperpositionMethod method() const override { return device_.method(); }

  void superpose(const SuperpositionInput& input, float* output) override {
    validate_superposition_input(input, options_);
    PD_CUDA_CHECK(cudaSetDevice(options_.gpu_device));  // the buffers live on that device
    const std::size_t n = input.shape.pixel_count();
    buffer_.reserve(4 * n);
    float* d_image = buffer_.get();
    float* d_sigma_x = d_image + n;
    float* d_sigma_y = d_sigma_x + n;
    float* d_out = d_sigma_y + n;
    copy_to_device_and_wait(d_image, input.image.data, n * sizeof(float));
    copy_to_device_and_wait(d_sigma_x, input.sigma_x_px.data, n * sizeof(float));
    copy_to_device_and_wait(d_sigma_y, input.sigma_y_px.data, n * sizeof(float));
    SuperpositionInput on_device{input.shape, {d_image, n}, {d_sigma_x, n}, {d_sigma_y, n}};
    device_.superpose_device(on_device, d_out);
    PD_CUDA_CHECK(cudaMemcpy(output, d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
  }

 private:
  SuperpositionOptions options_;
  DeviceSuperposer device_;
  cuda::DeviceBuffer<float> buffer_;
};

}  // namespace

std::unique_ptr<Superposer> make_gpu_superposer(SuperpositionMethod method,
                                                const SuperpositionOptions& options) {
  return std::make_unique<HostArraysGpuSuperposer>(method, options);
}

}  // namespace protondose
