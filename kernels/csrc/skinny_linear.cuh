// skinny_linear: out[M, N] = x[M, K] @ w[N, K]^T (+ bias) for decode batches, M <= 8.
// The weight is read once, with 16-byte loads; the whole problem is the time to stream it.
//
// CUDA path: each block owns 16*RT output rows and its warps split K. A warp multiplies a 16-row weight tile
// by the (at most 8) activation rows with mma.m16n8k16 (fp32 accumulate). The k order inside a 32-wide chunk
// is permuted identically for weight and activation, so each lane feeds the tensor core straight from its
// own 16-byte loads with no shuffles. Partial sums of the warps meet in shared memory.
// HIP path (and a CUDA variant for comparison): plain FMA, each block owns ROWS rows, wave reduction.
#pragma once

#include "ib_compat.h"

namespace imagebuild {

inline constexpr int kSkinnyMaxM = 8;

template <typename T>
IB_DEVICE uint4 ld_weight(const T* p) {
#if IB_HIP
  return *reinterpret_cast<const uint4*>(p);
#else
  return __ldcs(reinterpret_cast<const uint4*>(p));  // streamed once: do not keep it in L1
#endif
}

template <typename T>
IB_DEVICE uint4 ld_act(const T* p) {
#if IB_HIP
  return *reinterpret_cast<const uint4*>(p);
#else
  return __ldg(reinterpret_cast<const uint4*>(p));  // every block reads x: keep it cached
#endif
}

#if !IB_HIP
template <typename T>
IB_DEVICE void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                         uint32_t b1);

template <>
IB_DEVICE void mma_16816<bf16_t>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
IB_DEVICE void mma_16816<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Requires K % 8 == 0 and 16-byte aligned x and w (checked by the launcher).
template <typename T, int WARPS, int RT, int U>
__global__ void __launch_bounds__(WARPS * 32)
    skinny_mma_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                      const T* __restrict__ bias, int M, int N, int K) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // tile row (and activation row) this lane loads
  const int q = lane % 4;  // which 8-wide slice of a 32-wide k chunk
  const int n0 = blockIdx.x * 16 * RT;
  const int nchunks = (K + 31) / 32;

  float acc[RT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  const T* w_lo[RT];
  const T* w_hi[RT];
  bool ok_lo[RT], ok_hi[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int row = n0 + r * 16 + g;
    ok_lo[r] = row < N;
    ok_hi[r] = row + 8 < N;
    w_lo[r] = w + static_cast<int64_t>(ok_lo[r] ? row : 0) * K;
    w_hi[r] = w + static_cast<int64_t>(ok_hi[r] ? row + 8 : 0) * K;
  }
  const bool ok_x = g < M;
  const T* x_row = x + static_cast<int64_t>(ok_x ? g : 0) * K;

  for (int kc0 = warp; kc0 < nchunks; kc0 += WARPS * U) {
    uint4 wl[U][RT], wh[U][RT], xa[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (kc0 + u * WARPS) * 32 + q * 8;
      const bool ok_k = k < K;
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        wl[u][r] = (ok_k && ok_lo[r]) ? ld_weight(w_lo[r] + k) : zero;
        wh[u][r] = (ok_k && ok_hi[r]) ? ld_weight(w_hi[r] + k) : zero;
      }
      xa[u] = (ok_k && ok_x) ? ld_act(x_row + k) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        mma_16816<T>(acc[r], wl[u][r].x, wh[u][r].x, wl[u][r].y, wh[u][r].y, xa[u].x, xa[u].y);
        mma_16816<T>(acc[r], wl[u][r].z, wh[u][r].z, wl[u][r].w, wh[u][r].w, xa[u].z, xa[u].w);
      }
    }
  }

  __shared__ float red[WARPS][RT * 4][32];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j) red[warp][r * 4 + j][lane] = acc[r][j];
  __syncthreads();
  // acc[r][j] is out[m = 2q + (j & 1)][n = n0 + 16r + g + 8*(j >> 1)].
  for (int idx = threadIdx.x; idx < RT * 4 * 32; idx += WARPS * 32) {
    const int v = idx / 32;
    const int l = idx % 32;
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < WARPS; ++wi) s += red[wi][v][l];
    const int r = v / 4;
    const int j = v % 4;
    const int m = 2 * (l % 4) + (j & 1);
    const int n = n0 + 16 * r + l / 4 + 8 * (j >> 1);
    if (m < M && n < N) {
      if (bias != nullptr) s += Convert<T>::to_float(bias[n]);
      out[static_cast<int64_t>(m) * N + n] = Convert<T>::from_float(s);
    }
  }
}

#endif  // !IB_HIP

// Portable FMA version: each block owns ROWS weight rows; threads stride over K in 8-element vectors.
template <typename T, int ROWS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    skinny_fma_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                      const T* __restrict__ bias, int M, int N, int K) {
  constexpr int VEC = 8;
  constexpr int WARPS = THREADS / IB_WARP_SIZE;
  const int n0 = blockIdx.x * ROWS;
  const int kv = K / VEC;
  float acc[kSkinnyMaxM][ROWS];
#pragma unroll
  for (int m = 0; m < kSkinnyMaxM; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.f;

  for (int i = threadIdx.x; i < kv; i += THREADS) {
    float wf[ROWS][VEC];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int row = n0 + r < N ? n0 + r : N - 1;
      const uint4 u = ld_weight(w + static_cast<int64_t>(row) * K + i * VEC);
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int v = 0; v < VEC; ++v) wf[r][v] = Convert<T>::to_float(e[v]);
    }
#pragma unroll
    for (int m = 0; m < kSkinnyMaxM; ++m) {
      if (m < M) {
        const uint4 u = ld_act(x + static_cast<int64_t>(m) * K + i * VEC);
        const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          const float xv = Convert<T>::to_float(e[v]);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) acc[m][r] += xv * wf[r][v];
        }
      }
    }
  }

  __shared__ float red[WARPS][kSkinnyMaxM * ROWS];
  const int warp = threadIdx.x / IB_WARP_SIZE;
  const int lane = threadIdx.x % IB_WARP_SIZE;
#pragma unroll
  for (int m = 0; m < kSkinnyMaxM; ++m) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float s = acc[m][r];
#pragma unroll
      for (int off = IB_WARP_SIZE / 2; off > 0; off /= 2) s += IB_SHFL_XOR(s, off);
      if (lane == 0) red[warp][m * ROWS + r] = s;
    }
  }
  __syncthreads();
  if (threadIdx.x < kSkinnyMaxM * ROWS) {
    const int m = threadIdx.x / ROWS;
    const int r = threadIdx.x % ROWS;
    const int n = n0 + r;
    if (m < M && n < N) {
      float s = 0.f;
#pragma unroll
      for (int wi = 0; wi < WARPS; ++wi) s += red[wi][threadIdx.x];
      if (bias != nullptr) s += Convert<T>::to_float(bias[n]);
      out[static_cast<int64_t>(m) * N + n] = Convert<T>::from_float(s);
    }
  }
}

inline constexpr int kSkinnyConfigs = 9;

// True when the kernels can take the problem; otherwise the caller falls back to a library GEMM.
template <typename T>
bool skinny_supported(const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= kSkinnyMaxM && N >= 1 && K >= 8 && K % 8 == 0 && N < (1LL << 31) &&
         K < (1LL << 31) && N * K < (1LL << 62) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename T, int WARPS, int RT, int U>
ib_error_t launch_skinny_mma(T* out, const T* x, const T* w, const T* bias, int M, int N, int K,
                             ib_stream_t stream) {
#if IB_HIP
  (void)out, (void)x, (void)w, (void)bias, (void)M, (void)N, (void)K, (void)stream;
  return hipErrorNotSupported;
#else
  const int blocks = (N + 16 * RT - 1) / (16 * RT);
  skinny_mma_kernel<T, WARPS, RT, U><<<blocks, WARPS * 32, 0, stream>>>(out, x, w, bias, M, N, K);
  return IB_GET_LAST_ERROR();
#endif
}

template <typename T>
ib_error_t launch_skinny_fma(T* out, const T* x, const T* w, const T* bias, int M, int N, int K,
                             ib_stream_t stream) {
  constexpr int ROWS = 4;
  constexpr int THREADS = 256;
  skinny_fma_kernel<T, ROWS, THREADS><<<(N + ROWS - 1) / ROWS, THREADS, 0, stream>>>(out, x, w, bias, M, N, K);
  return IB_GET_LAST_ERROR();
}

// Co-resident blocks per multiprocessor of one mma shape (cached; the same for every GPU of one build).
template <typename T, int WARPS, int RT, int U>
int skinny_mma_blocks_per_sm() {
#if IB_HIP
  return 1;
#else
  static int per_sm = 0;
  if (per_sm == 0) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, skinny_mma_kernel<T, WARPS, RT, U>, WARPS * 32, 0) !=
            cudaSuccess ||
        n <= 0)
      n = 1;
    per_sm = n;
  }
  return per_sm;
#endif
}

// The default choice, from H200 measurements (bench/results/kernels_h200.json): up to 1024 tiles of 16 rows,
// 8 warps share each tile's K; beyond, 32-row blocks of 4 warps when their count nearly fills whole waves of
// co-resident blocks (the tail of a partial wave costs more than the larger tile saves), else 16-row blocks.
template <typename T>
int skinny_default_cfg(int N, int sm_count) {
  if ((N + 15) / 16 <= 1024) return 1;
  const double cap = static_cast<double>(sm_count) * skinny_mma_blocks_per_sm<T, 4, 2, 4>();
  const double waves = ((N + 31) / 32) / cap;
  const double filled = waves / static_cast<double>(static_cast<long long>(waves + 0.999999));
  return filled >= 0.9 ? 5 : 3;
}

// cfg 0 picks the kernel (skinny_default_cfg); 1-5, 7, 8 are mma shapes (CUDA), 6 the portable FMA kernel.
// Caller checked skinny_supported(). out is [M, N] contiguous; bias is null or [N].
template <typename T>
ib_error_t launch_skinny_linear(T* out, const T* x, const T* w, const T* bias, int M, int N, int K, int cfg,
                                int sm_count, ib_stream_t stream) {
#if IB_HIP
  (void)cfg, (void)sm_count;
  return launch_skinny_fma<T>(out, x, w, bias, M, N, K, stream);
#else
  if (cfg == 0) cfg = skinny_default_cfg<T>(N, sm_count);
  switch (cfg) {
    case 7: return launch_skinny_mma<T, 16, 1, 2>(out, x, w, bias, M, N, K, stream);
    case 8: return launch_skinny_mma<T, 8, 1, 8>(out, x, w, bias, M, N, K, stream);
    case 2: return launch_skinny_mma<T, 8, 2, 2>(out, x, w, bias, M, N, K, stream);
    case 3: return launch_skinny_mma<T, 4, 1, 4>(out, x, w, bias, M, N, K, stream);
    case 4: return launch_skinny_mma<T, 8, 1, 2>(out, x, w, bias, M, N, K, stream);
    case 5: return launch_skinny_mma<T, 4, 2, 4>(out, x, w, bias, M, N, K, stream);
    case 6: return launch_skinny_fma<T>(out, x, w, bias, M, N, K, stream);
    default: return launch_skinny_mma<T, 8, 1, 4>(out, x, w, bias, M, N, K, stream);
  }
#endif
}

}  // namespace imagebuild
