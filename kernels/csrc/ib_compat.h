// Platform glue for the device code: the same source builds with nvcc (CUDA) and with clang/hipcc (HIP).
// Kept free of torch so the kernels can be compile-checked on their own (kernels/tools/device_check.cu).
#pragma once

#include <stdint.h>

#if defined(__HIP_PLATFORM_AMD__) || defined(USE_ROCM)
#define IB_HIP 1
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#else
#define IB_HIP 0
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#define IB_DEVICE __device__ __forceinline__

#if IB_HIP
using ib_stream_t = hipStream_t;
using ib_error_t = hipError_t;
#define IB_SUCCESS hipSuccess
#define IB_GET_LAST_ERROR() hipGetLastError()
#define IB_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#define IB_WARP_SIZE 64  // CDNA (gfx908/gfx90a/gfx942) runs wave64
#else
using ib_stream_t = cudaStream_t;
using ib_error_t = cudaError_t;
#define IB_SUCCESS cudaSuccess
#define IB_GET_LAST_ERROR() cudaGetLastError()
#define IB_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#define IB_WARP_SIZE 32
#endif

namespace imagebuild {

// bf16 as raw bits: no dependency on cuda_bf16.h / hip_bf16.h, whose names differ between toolkits.
struct alignas(2) bf16_t {
  uint16_t bits;
};

template <typename T>
struct Convert;

template <>
struct Convert<float> {
  static IB_DEVICE float to_float(float v) { return v; }
  static IB_DEVICE float from_float(float v) { return v; }
};

template <>
struct Convert<__half> {
  static IB_DEVICE float to_float(__half v) { return __half2float(v); }
  static IB_DEVICE __half from_float(float v) { return __float2half_rn(v); }
};

template <>
struct Convert<bf16_t> {
  static IB_DEVICE float to_float(bf16_t v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }
  static IB_DEVICE bf16_t from_float(float v) {
    bf16_t r;
#if !IB_HIP && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));  // one instruction on sm_80+
#else
    const uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet NaN
      r.bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    } else {  // round to nearest even
      r.bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
#endif
    return r;
  }
};

}  // namespace imagebuild
