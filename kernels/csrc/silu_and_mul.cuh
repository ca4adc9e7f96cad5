// silu_and_mul: out[t, i] = silu(x[t, i]) * x[t, d + i], x is [tokens, 2d]. A pure bandwidth kernel:
// 16-byte vectors when d is a multiple of the vector width and the pointers are aligned, scalars otherwise.
#pragma once

#include "ib_compat.h"

namespace imagebuild {

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <typename P, bool STREAM>
IB_DEVICE P load_pack(const P* p) {
#if !IB_HIP
  if constexpr (STREAM && sizeof(P) == 16) {
    uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
    return *reinterpret_cast<P*>(&u);
  }
#endif
  return *p;
}

template <typename P, bool STREAM>
IB_DEVICE void store_pack(P* p, const P& v) {
#if !IB_HIP
  if constexpr (STREAM && sizeof(P) == 16) {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
    return;
  }
#endif
  *p = v;
}

IB_DEVICE float silu(float v) {
#if IB_HIP
  return v / (1.0f + __expf(-v));
#else
  return __fdividef(v, 1.0f + __expf(-v));  // 0 when exp overflows past 2^126: silu(v < -87) ~ -0
#endif
}

// Grid: x walks the tokens, y splits a row's vectors so that small token counts still fill the GPU.
// Each thread issues UNROLL independent vector loads of both halves before using any of them.
template <typename T, int VEC, int UNROLL, bool STREAM>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t tokens, int64_t d) {
  using P = Pack<T, VEC>;
  const int64_t nv = d / VEC;
  const int64_t step = static_cast<int64_t>(blockDim.x) * UNROLL;
  for (int64_t row = blockIdx.x; row < tokens; row += gridDim.x) {
    const P* a_row = reinterpret_cast<const P*>(x + row * 2 * d);
    const P* b_row = reinterpret_cast<const P*>(x + row * 2 * d + d);
    P* o_row = reinterpret_cast<P*>(out + row * d);
    for (int64_t base = blockIdx.y * step + threadIdx.x; base < nv; base += gridDim.y * step) {
      P a[UNROLL], b[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int64_t j = base + u * static_cast<int64_t>(blockDim.x);
        if (j < nv) {
          a[u] = load_pack<P, STREAM>(a_row + j);
          b[u] = load_pack<P, STREAM>(b_row + j);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int64_t j = base + u * static_cast<int64_t>(blockDim.x);
        if (j < nv) {
          P o;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float av = Convert<T>::to_float(a[u].v[e]);
            const float bv = Convert<T>::to_float(b[u].v[e]);
            o.v[e] = Convert<T>::from_float(silu(av) * bv);
          }
          store_pack<P, STREAM>(o_row + j, o);
        }
      }
    }
  }
}

// Flat variant: one thread per UNROLL vectors over the whole output, no partly idle blocks at row ends.
// Needs fewer than 2^31 vectors in all (32-bit index math).
template <typename T, int VEC, int UNROLL>
__global__ void silu_and_mul_flat_kernel(T* __restrict__ out, const T* __restrict__ x, uint32_t nv, uint32_t total) {
  using P = Pack<T, VEC>;
  const P* xv = reinterpret_cast<const P*>(x);
  P* ov = reinterpret_cast<P*>(out);
  const uint32_t base = blockIdx.x * blockDim.x * UNROLL + threadIdx.x;
  P a[UNROLL], b[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const uint32_t idx = base + u * blockDim.x;
    if (idx < total) {
      const uint32_t row = idx / nv;
      const uint32_t col = idx - row * nv;
      const size_t src = static_cast<size_t>(row) * 2 * nv + col;
      a[u] = xv[src];
      b[u] = xv[src + nv];
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const uint32_t idx = base + u * blockDim.x;
    if (idx < total) {
      P o;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        o.v[e] = Convert<T>::from_float(silu(Convert<T>::to_float(a[u].v[e])) * Convert<T>::to_float(b[u].v[e]));
      }
      ov[idx] = o;
    }
  }
}

// Grid-stride variant (cfg 10-13): a fixed grid sized to fill every multiprocessor once; each pass a thread issues
// UNROLL vector loads of both halves, `stride` vectors apart, before using any of them. Fewer than 2^31 vectors.
// Measured on the H200 under graph timing: 0.86-0.92 of copy at every size, below the flat default (0.95-1.02),
// so no size class uses it by default; kept for bench/kernels.py to compare.
template <typename T, int VEC, int UNROLL>
__global__ void silu_and_mul_gs_kernel(T* __restrict__ out, const T* __restrict__ x, uint32_t nv, uint32_t total) {
  using P = Pack<T, VEC>;
  const P* xv = reinterpret_cast<const P*>(x);
  P* ov = reinterpret_cast<P*>(out);
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t base = blockIdx.x * blockDim.x + threadIdx.x; base < total; base += stride * UNROLL) {
    P a[UNROLL], b[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const uint32_t idx = base + u * stride;
      if (idx < total) {
        const uint32_t row = idx / nv;
        const size_t src = static_cast<size_t>(row) * 2 * nv + (idx - row * nv);
        a[u] = load_pack<P, true>(xv + src);
        b[u] = load_pack<P, true>(xv + src + nv);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const uint32_t idx = base + u * stride;
      if (idx < total) {
        P o;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          o.v[e] = Convert<T>::from_float(silu(Convert<T>::to_float(a[u].v[e])) * Convert<T>::to_float(b[u].v[e]));
        }
        store_pack<P, true>(ov + idx, o);
      }
    }
  }
}

// Launch configurations; 0 picks one from the problem size. Others exist for bench/kernels.py to compare.
struct SiluConfig {
  int threads;
  int unroll;
  bool stream;
};

inline SiluConfig silu_config(int cfg) {
  switch (cfg) {
    case 1: return {256, 1, false};
    case 2: return {256, 2, false};
    case 3: return {256, 4, false};
    case 4: return {128, 4, false};
    case 5: return {512, 2, false};
    case 6: return {256, 2, true};
    case 7: return {256, 4, true};
    case 8: return {256, 4, false};  // flat
    case 9: return {256, 2, false};  // flat
    case 10: return {256, 2, true};  // grid-stride, 8 blocks per SM
    case 11: return {256, 4, true};  // grid-stride, 4 blocks per SM
    case 12: return {512, 2, true};  // grid-stride, 4 blocks per SM
    case 13: return {128, 4, true};  // grid-stride, 16 blocks per SM
    default: return {256, 2, false};  // flat (measured best on H200 for fp16; see bench/results)
  }
}

inline constexpr int kSiluConfigs = 14;

template <typename T, int VEC, int UNROLL>
ib_error_t launch_silu_gs(T* out, const T* x, int64_t d, int64_t total, int threads, int sm_count,
                          ib_stream_t stream) {
  const int64_t need = (total + threads - 1) / threads;
  const int64_t full = static_cast<int64_t>(sm_count) * (2048 / threads) / (UNROLL == 4 && threads == 256 ? 2 : 1);
  const unsigned blocks = static_cast<unsigned>(need < full ? need : full);
  silu_and_mul_gs_kernel<T, VEC, UNROLL><<<blocks, threads, 0, stream>>>(out, x, static_cast<uint32_t>(d / VEC),
                                                                          static_cast<uint32_t>(total));
  return IB_GET_LAST_ERROR();
}

template <typename T, int VEC, int UNROLL, bool STREAM>
ib_error_t launch_silu_variant(T* out, const T* x, int64_t tokens, int64_t d, int threads, int sm_count,
                               ib_stream_t stream) {
  const int64_t nv = d / VEC;
  const int64_t per_block = static_cast<int64_t>(threads) * UNROLL;
  int64_t blocks_y = (nv + per_block - 1) / per_block;
  int64_t blocks_x = tokens < 2147483647 ? tokens : 2147483647;
  // Few tokens: make the y split finer so at least two blocks per multiprocessor run.
  while (blocks_x * blocks_y < 2LL * sm_count && blocks_y * threads < nv) ++blocks_y;
  if (blocks_y > 65535) blocks_y = 65535;
  dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y));
  silu_and_mul_kernel<T, VEC, UNROLL, STREAM><<<grid, threads, 0, stream>>>(out, x, tokens, d);
  return IB_GET_LAST_ERROR();
}

// out: [tokens, d], x: [tokens, 2d], both contiguous. tokens == 0 launches nothing.
template <typename T>
ib_error_t launch_silu_and_mul(T* out, const T* x, int64_t tokens, int64_t d, int cfg, int sm_count,
                               ib_stream_t stream) {
  if (tokens == 0 || d == 0) return IB_SUCCESS;
  constexpr int VEC = 16 / sizeof(T);
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) && (reinterpret_cast<uintptr_t>(out) % 16 == 0);
  const SiluConfig c = silu_config(cfg);
  if (!(aligned && d % VEC == 0)) {
    return launch_silu_variant<T, 1, 4, false>(out, x, tokens, d, c.threads, sm_count, stream);
  }
  const int64_t total = tokens * (d / VEC);
  if (cfg >= 10 && total < (1LL << 31) - 4096) {
    if (c.unroll == 4) return launch_silu_gs<T, VEC, 4>(out, x, d, total, c.threads, sm_count, stream);
    return launch_silu_gs<T, VEC, 2>(out, x, d, total, c.threads, sm_count, stream);
  }
  if ((cfg == 0 || cfg == 8 || cfg == 9) && total < (1LL << 31) - 4096) {
    const int64_t per_block = static_cast<int64_t>(c.threads) * c.unroll;
    const unsigned blocks = static_cast<unsigned>((total + per_block - 1) / per_block);
    if (c.unroll == 4) {
      silu_and_mul_flat_kernel<T, VEC, 4><<<blocks, c.threads, 0, stream>>>(
          out, x, static_cast<uint32_t>(d / VEC), static_cast<uint32_t>(total));
    } else {
      silu_and_mul_flat_kernel<T, VEC, 2><<<blocks, c.threads, 0, stream>>>(
          out, x, static_cast<uint32_t>(d / VEC), static_cast<uint32_t>(total));
    }
    return IB_GET_LAST_ERROR();
  }
  if (cfg == 0) return launch_silu_variant<T, VEC, 4, false>(out, x, tokens, d, 256, sm_count, stream);
  if (c.stream) {
    if (c.unroll == 4) return launch_silu_variant<T, VEC, 4, true>(out, x, tokens, d, c.threads, sm_count, stream);
    return launch_silu_variant<T, VEC, 2, true>(out, x, tokens, d, c.threads, sm_count, stream);
  }
  if (c.unroll == 1) return launch_silu_variant<T, VEC, 1, false>(out, x, tokens, d, c.threads, sm_count, stream);
  if (c.unroll == 4) return launch_silu_variant<T, VEC, 4, false>(out, x, tokens, d, c.threads, sm_count, stream);
  return launch_silu_variant<T, VEC, 2, false>(out, x, tokens, d, c.threads, sm_count, stream);
}

}  // namespace imagebuild
