// Timed runs for the benchmark: CUDA events around device-resident work.
#include <cuda_runtime.h>

#include <algorithm>

#include "../bench_hooks.h"
#include "convolution_kernels.cuh"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/cuda/device_buffer.cuh"
#include "protondose/core/error.h"
#include "superposition_kernels.cuh"

namespace protondose::bench {

const char* variant_name(SuperpositionVariant variant) {
  switch (variant) {
    case SuperpositionVariant::kGatherExact: return "gather-exact";
    case SuperpositionVariant::kScatterAtomic: return "scatter-atomic";
    case SuperpositionVariant::kScatterTiled: return "scatter-tiled";
    case SuperpositionVariant::kScatterTiledDeviceLaunch: return "scatter-tiled-device-launch";
    case SuperpositionVariant::kScatterTiledDeterministic: return "scatter-tiled-deterministic";
    case SuperpositionVariant::kScatterTiledFixedRadius: return "scatter-tiled-fixed-r";
    case SuperpositionVariant::kRegisterBlocked: return "scatter-register-blocked";
    case SuperpositionVariant::kRegisterBlockedFixedRadius: return "scatter-register-blocked-fixed-r";
    case SuperpositionVariant::kTensorCore: return "scatter-tensor-core";
    case SuperpositionVariant::kTensorCoreDeterministic: return "scatter-tensor-core-deterministic";
    case SuperpositionVariant::kTensorCoreFixedRadius: return "scatter-tensor-core-fixed-r";
    case SuperpositionVariant::kTensorCoreFixedRadiusChained: return "scatter-tensor-core-fixed-r-chained";
  }
  return "unknown";
}

namespace {

class EventTimer {
 public:
  EventTimer() {
    PD_CUDA_CHECK(cudaEventCreate(&start_));
    PD_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  template <class Work>
  Timing time(Work&& work, int warmup, int repetitions, cudaStream_t stream) {
    for (int i = 0; i < warmup; ++i) work();
    PD_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> ms;
    for (int i = 0; i < repetitions; ++i) {
      PD_CUDA_CHECK(cudaEventRecord(start_, stream));
      work();
      PD_CUDA_CHECK(cudaEventRecord(stop_, stream));
      PD_CUDA_CHECK(cudaEventSynchronize(stop_));
      float elapsed = 0.0f;
      PD_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start_, stop_));
      ms.push_back(elapsed);
    }
    std::sort(ms.begin(), ms.end());
    Timing t;
    t.repetitions = repetitions;
    t.min_ms = ms.front();
    t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    return t;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

}  // namespace

Timing time_superposition(SuperpositionVariant variant, const SuperpositionInput& in,
                          const SuperpositionOptions& options, int fixed_radius, int warmup, int repetitions) {
  validate_superposition_input(in, options);
  const std::size_t n = in.shape.pixel_count();
  cuda::DeviceBuffer<float> d_data(4 * n);
  cuda::DeviceBuffer<unsigned long long> d_fixed;
  PD_CUDA_CHECK(cudaMemcpy(d_data.get(), in.image.data, n * sizeof(float), cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaMemcpy(d_data.get() + n, in.sigma_x_px.data, n * sizeof(float), cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaMemcpy(d_data.get() + 2 * n, in.sigma_y_px.data, n * sizeof(float), cudaMemcpyHostToDevice));
  // Pageable copies may return before their DMA lands; the timed work runs
  // in a non-blocking stream that would not wait for it.
  PD_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));

  cuda::StackParams p;
  p.slices = in.shape.slices;
  p.rows = in.shape.rows;
  p.cols = in.shape.cols;
  p.tiles_x = (p.cols + cuda::kTileCols - 1) / cuda::kTileCols;
  p.tiles_y = (p.rows + cuda::kTileRows - 1) / cuda::kTileRows;
  p.cutoff_sigmas = static_cast<float>(options.cutoff_sigmas);
  p.image = d_data.get();
  p.sigma_x = d_data.get() + n;
  p.sigma_y = d_data.get() + 2 * n;
  p.out = d_data.get() + 3 * n;
  const bool host_buckets = variant == SuperpositionVariant::kScatterTiled ||
                            variant == SuperpositionVariant::kScatterTiledDeterministic ||
                            variant == SuperpositionVariant::kRegisterBlocked ||
                            variant == SuperpositionVariant::kTensorCore ||
                            variant == SuperpositionVariant::kTensorCoreDeterministic;
  p.separable_uniform_slices = options.separable_uniform_slices && host_buckets;
  p.clear_output_in_analysis = host_buckets;  // as DeviceSuperposer::run without a queued analysis or summary
  cuda::SeparableScratch separable_scratch;
  cuda::DeviceBuffer<unsigned char> scratch(cuda::analysis_bytes(p));
  const cuda::StackAnalysis a = cuda::analysis_layout(p, scratch.get());
  p.fixed_scale = a.fixed_scale;
  if (variant == SuperpositionVariant::kScatterTiledDeterministic ||
      variant == SuperpositionVariant::kTensorCoreDeterministic) {
    d_fixed.reserve(n);
    p.out_fixed = d_fixed.get();
  }
  cudaStream_t stream = nullptr;
  PD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::BucketDispatch bucket_dispatch;
  auto work = [&] {
    // The host-launched bucket paths clear their output themselves (as in DeviceSuperposer).
    if (!host_buckets) {
      if (p.out_fixed)
        PD_CUDA_CHECK(cudaMemsetAsync(p.out_fixed, 0, n * sizeof(unsigned long long), stream));
      else
        PD_CUDA_CHECK(cudaMemsetAsync(p.out, 0, n * sizeof(float), stream));
    }
    switch (variant) {
      case SuperpositionVariant::kGatherExact:
        cuda::launch_analyse(p, a, stream);
        cuda::launch_gather_exact(p, a, stream);
        break;
      case SuperpositionVariant::kScatterAtomic:
        cuda::launch_analyse(p, a, stream);
        cuda::launch_fixed_scale(p, a, stream);
        cuda::launch_scatter_atomic(p, stream);
        break;
      case SuperpositionVariant::kScatterTiled:
      case SuperpositionVariant::kScatterTiledDeterministic:
      case SuperpositionVariant::kScatterTiledDeviceLaunch:
        cuda::launch_analyse(p, a, stream);
        cuda::launch_scatter_tiled(p, a,
                                   variant == SuperpositionVariant::kScatterTiledDeviceLaunch ? cuda::BucketLaunch::kFromDevice
                                                                                             : cuda::BucketLaunch::kFromHost,
                                   separable_scratch, bucket_dispatch, stream);
        if (p.out_fixed) cuda::launch_fixed_to_float(p, stream);
        break;
      case SuperpositionVariant::kScatterTiledFixedRadius:
        cuda::launch_scatter_tiled_fixed_radius(p, fixed_radius, stream);
        break;
      case SuperpositionVariant::kRegisterBlocked:
        cuda::launch_analyse(p, a, stream);
        cuda::launch_scatter_register_blocked(p, a, separable_scratch, bucket_dispatch, stream);
        break;
      case SuperpositionVariant::kRegisterBlockedFixedRadius:
        cuda::launch_scatter_register_blocked_fixed_radius(p, fixed_radius, stream);
        break;
      case SuperpositionVariant::kTensorCore:
      case SuperpositionVariant::kTensorCoreDeterministic:
        cuda::launch_analyse(p, a, stream);
        cuda::launch_scatter_tensor_core(p, a, options.tensor_core_min_radius_px, separable_scratch, bucket_dispatch,
                                         stream);
        if (p.out_fixed) cuda::launch_fixed_to_float(p, stream);
        break;
      case SuperpositionVariant::kTensorCoreFixedRadius:
        cuda::launch_scatter_tensor_core_fixed_radius(p, fixed_radius, cuda::TensorCoreAccumulation::kFreshRowSums,
                                                      stream);
        break;
      case SuperpositionVariant::kTensorCoreFixedRadiusChained:
        cuda::launch_scatter_tensor_core_fixed_radius(p, fixed_radius, cuda::TensorCoreAccumulation::kChained, stream);
        break;
    }
  };
  EventTimer timer;
  Timing t;
  try {
    t = timer.time(work, warmup, repetitions, stream);
    t.output.resize(n);
    PD_CUDA_CHECK(cudaMemcpy(t.output.data(), p.out, n * sizeof(float), cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
  PD_CUDA_CHECK(cudaStreamDestroy(stream));
  return t;
}

Timing time_convolution(ConvolutionMethod method, const UniformSigmaInput& in, const SuperpositionOptions& options,
                        int warmup, int repetitions) {
  validate_uniform_sigma_input(in, options);
  const std::size_t n = in.shape.pixel_count();
  cuda::DeviceBuffer<float> d_in(n), d_out(n);
  PD_CUDA_CHECK(cudaMemcpy(d_in.get(), in.image.data, n * sizeof(float), cudaMemcpyHostToDevice));
  PD_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));  // its DMA landed (see above)
  cuda::DeviceConvolution conv(method, in, options);
  EventTimer timer;
  Timing t = timer.time([&] { conv.launch(d_in.get(), d_out.get(), nullptr); }, warmup, repetitions, nullptr);
  t.output.resize(n);
  PD_CUDA_CHECK(cudaMemcpy(t.output.data(), d_out.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return t;
}

}  // namespace protondose::bench
