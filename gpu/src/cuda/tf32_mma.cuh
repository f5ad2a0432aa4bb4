#pragma once
// The tensor cores' products at float accuracy from TF32 operands: the split
// of a float into TF32 high part and remainder, one mma.sync.m16n8k8, and the
// three products that keep a float product. Shared by the tensor-core scatter
// (scatter_tensor_core.cu) and the benchmark of its ceiling
// (gpu/bench/mma_ceiling.cu), so that the benchmark times the kernel's own
// instructions.
#include <cuda_runtime.h>

#include <cstdint>

namespace protondose::cuda {

/// TF32 high part (the float truncated to TF32's 10 mantissa bits) and the
/// exact float remainder, |lo| < 2⁻¹⁰|x|, whose own low bits the tensor core
/// drops (≤ 2⁻²⁰|x|). Two instructions, against five for cvt.rna.tf32.
__device__ inline void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = __float_as_uint(x) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
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

/// d += a · b at float accuracy from three TF32 products: hi·hi + hi·lo +
/// lo·hi, small terms first (the neglected lo·lo is ≤ 2⁻²⁰ of the product).
__device__ inline void mma_3xtf32(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                  uint32_t b0_hi, uint32_t b1_hi, uint32_t b0_lo, uint32_t b1_lo) {
  mma_tf32(d, a_lo, b0_hi, b1_hi);
  mma_tf32(d, a_hi, b0_lo, b1_lo);
  mma_tf32(d, a_hi, b0_hi, b1_hi);
}

}  // namespace protondose::cuda
