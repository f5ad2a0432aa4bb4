// protondose-mma-ceiling: what the tensor cores give the KS core's products
// through mma.sync on this GPU, without the rest of the kernel — the
// ceiling against which docs/ks-core.md weighs the tensor-core scatter.
//
// 1. Raw: mma.sync.m16n8k8 TF32 (FP32 accumulate) with operands in registers,
//    `chains` independent accumulators per warp, `warps` warps per SM:
//    TFLOP/s (2 flops per multiply-add). Then the two other shapes an exact
//    product could be built from — m16n8k16 f16 (FP32 accumulate) and
//    m16n8k32 s8 (s32 accumulate) — each also as its time per instruction
//    against TF32's: one of them costs the tensor pipe what one TF32 mma
//    costs if it runs at K/8 times TF32's rate.
// 2. The RB 1 kernel's product step (scatter_tensor_core.cu,
//    multiply_rows_one_warp at R' = 8, one 8-pixel group of one source row):
//    14 fragment values split into TF32 high and low parts (8 of A for two
//    16-row blocks, 6 of B for three column blocks), then 6 products of three
//    mma each into 6 accumulators — everything but the shared-memory loads,
//    the weight tables and the flush. Its time per group-row, times the
//    group-rows of the benchmark's r_max 8 stack (64 × 512²: 32,768 tiles ×
//    16 rows × 4 groups), bounds from below what the products alone cost there.
//
// CUDA events, warm-up launches, the median of repeated launches. Run it on
// the GPU the figures are for; it asserts nothing about the times.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/gpu/cuda/cuda_check.cuh"
#include "protondose/gpu/device_superposition.h"
#include "tf32_mma.cuh"  // the scatter's own split and products

namespace {

using protondose::cuda::mma_3xtf32;
using protondose::cuda::mma_tf32;
using protondose::cuda::split_tf32;

/// The shapes of mma.sync that `raw_mma_kernel` times. Each takes four A
/// registers and two B registers per lane (the fragments of PTX's mma
/// m16n8kK for that type) and four accumulators.
struct MmaTf32 {
  using Accumulator = float;
  static constexpr int kK = 8;
  static constexpr const char* kName = "m16n8k8 TF32, FP32 accumulate";
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_tf32(d, a, b0, b1);
  }
};
struct MmaF16 {
  using Accumulator = float;
  static constexpr int kK = 16;
  static constexpr const char* kName = "m16n8k16 f16, FP32 accumulate";
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
struct MmaS8 {
  using Accumulator = int;
  static constexpr int kK = 32;
  static constexpr const char* kName = "m16n8k32 s8, s32 accumulate";
  __device__ static void run(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

/// `iterations` × kChains mma of shape Mma per warp into kChains independent
/// accumulators. The operand bits are small normal numbers in TF32 and f16
/// and small integers in s8.
template <class Mma, int kChains>
__global__ void __launch_bounds__(1024) raw_mma_kernel(int iterations, float* sink) {
  const uint32_t seed = threadIdx.x * 2654435761u;
  const uint32_t a[4] = {(seed & 0x03000300u) | 0x38003800u, ((seed >> 3) & 0x03000300u) | 0x38003800u, 0x3c003800u,
                         0x38003c00u};
  const uint32_t b0 = 0x3c003c00u, b1 = 0x38003800u;
  typename Mma::Accumulator d[kChains][4] = {};
  for (int i = 0; i < iterations; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) Mma::run(d[c], a, b0, b1);
  // Summed in float, element by element: four s8 sums of up to 1.9·10⁹
  // each would overflow an int.
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int q = 0; q < 4; ++q) s += static_cast<float>(d[c][q]);
  if (s == 12345.678f) sink[threadIdx.x] = s;  // never true; keeps the products
}

/// The RB 1 product step, `iterations` group-rows per warp: fresh fragment
/// values each time (one FADD per value, as a load would give a new one),
/// split, then 6 × 3 mma (two row blocks × three column blocks).
__global__ void rb1_step_kernel(int iterations, float* sink) {
  float a_src[2][4], b_src[3][2];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int q = 0; q < 4; ++q) a_src[b][q] = 0.001f * (threadIdx.x + 7 * b + q);
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int q = 0; q < 2; ++q) b_src[i][q] = 0.002f * (threadIdx.x + 5 * i + q);
  float d[2][3][4] = {};
  for (int it = 0; it < iterations; ++it) {
    uint32_t b_hi[3][2], b_lo[3][2];
#pragma unroll
    for (int i = 0; i < 3; ++i)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        b_src[i][q] += 1.0f;
        split_tf32(b_src[i][q], b_hi[i][q], b_lo[i][q]);
      }
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      uint32_t a_hi[4], a_lo[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        a_src[b][q] += 1.0f;
        split_tf32(a_src[b][q], a_hi[q], a_lo[q]);
      }
#pragma unroll
      for (int i = 0; i < 3; ++i) mma_3xtf32(d[b][i], a_hi, a_lo, b_hi[i][0], b_hi[i][1], b_lo[i][0], b_lo[i][1]);
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int i = 0; i < 3; ++i) s += d[b][i][0] + d[b][i][1] + d[b][i][2] + d[b][i][3];
  if (s == 12345.678f) sink[threadIdx.x] = s;
}

/// Median of `repetitions` timed launches (after two untimed ones), in ms.
template <class Launch>
double median_ms(Launch&& launch, int repetitions) {
  cudaEvent_t start, stop;
  PD_CUDA_CHECK(cudaEventCreate(&start));
  PD_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) launch();
  PD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < repetitions; ++i) {
    PD_CUDA_CHECK(cudaEventRecord(start));
    launch();
    PD_CUDA_CHECK(cudaEventRecord(stop));
    PD_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.0f;
    PD_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  PD_CUDA_CHECK_LAUNCH("mma ceiling kernel");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int run_benchmarks() {
  if (protondose::gpu_device_count() == 0)
    throw protondose::UnavailableError("protondose-mma-ceiling times the tensor cores: no CUDA device");
  cudaDeviceProp prop{};
  PD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  PD_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("Device: %s, %d SMs at %d MHz\n\n", prop.name, sms, clock_khz / 1000);
  float* sink = nullptr;
  PD_CUDA_CHECK(cudaMalloc(&sink, 1024 * sizeof(float)));
  constexpr int kRepetitions = 9;
  constexpr double kTf32MmaFlops = 2.0 * 16 * 8 * 8;

  // One block of `warps` warps on each SM (a grid of one block per SM).
  const int blocks = sms;
  const int iterations = 1 << 14;
  double tf32_ns_per_mma = 0.0;  // the TF32 row's, per SM, for the shapes after it
  const auto raw_table = [&](auto mma) {
    using Mma = decltype(mma);
    const bool tf32 = Mma::kK == 8;
    std::printf("\n| mma.sync %s, operands in registers | warps per SM (one block each) | T(FL)OP/s | ns per mma per SM%s |\n"
                "|---|---|---|---|%s\n",
                Mma::kName, tf32 ? "" : " | against one TF32 mma", tf32 ? "" : "---|");
    for (int warps : {4, 8, 16, 32}) {
      const auto run = [&](auto kernel, int chains) {
        const double ms = median_ms([&] { kernel<<<blocks, 32 * warps>>>(iterations, sink); }, kRepetitions);
        const double mma_count = static_cast<double>(blocks) * warps * iterations * chains;
        const double ns_per_mma = ms * 1e6 / (mma_count / sms);
        const double ops = mma_count * 2.0 * 16 * 8 * Mma::kK;
        // The TF32 table's best rate (12 chains, 32 warps) is the unit of the others.
        if (tf32 && chains == 12 && warps == 32) tf32_ns_per_mma = ns_per_mma;
        std::printf("| %d independent accumulators per warp | %d | %.1f | %.4f", chains, warps, ops / (ms * 1e-3) / 1e12,
                    ns_per_mma);
        if (!tf32) std::printf(" | %.2f", ns_per_mma / tf32_ns_per_mma);
        std::printf(" |\n");
      };
      run(raw_mma_kernel<Mma, 2>, 2);
      run(raw_mma_kernel<Mma, 6>, 6);
      run(raw_mma_kernel<Mma, 12>, 12);
    }
  };
  raw_table(MmaTf32{});
  raw_table(MmaF16{});
  raw_table(MmaS8{});

  std::printf("\n| RB 1 product step (14 splits, 18 mma per group-row) | warps per SM (one block each) | ns per group-row (GPU) | "
              "r_max 8 stack's 2,097,152 group-rows (ms) | TF32 TFLOP/s |\n|---|---|---|---|---|\n");
  const int step_iterations = 1 << 13;
  for (int warps : {4, 8, 16, 24}) {
    const double ms =
        median_ms([&] { rb1_step_kernel<<<blocks, 32 * warps>>>(step_iterations, sink); }, kRepetitions);
    const double group_rows = static_cast<double>(blocks) * warps * step_iterations;
    const double ns_per_group_row = ms * 1e6 / group_rows;
    std::printf("| | %d | %.4f | %.3f | %.1f |\n", warps, ns_per_group_row, ns_per_group_row * 2097152 * 1e-6,
                group_rows * 18 * kTf32MmaFlops / (ms * 1e-3) / 1e12);
  }
  PD_CUDA_CHECK(cudaFree(sink));
  return 0;
}

}  // namespace

int main() {
  try {
    return run_benchmarks();
  } catch (const protondose::Error& e) {
    std::cerr << "protondose-mma-ceiling: [" << protondose::category_name(e.category()) << "] " << e.what() << "\n";
    return protondose::exit_code(e.category());
  }
}
