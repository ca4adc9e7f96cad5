// skinny_linear: out[M, N] = x[M, K] @ w[N, K]^T (+ bias) for decode batches, M <= 16.
// The weight is read once, with 16-byte loads; the whole problem is the time to stream it.
//
// CUDA path: a block owns 16*RT output rows; its warps split K, and with a split S > 1 the S blocks of one
// thread-block cluster (sm_90) split K further. A warp multiplies a 16-row weight tile by up to 8 activation
// rows per mma.m16n8k16 (MT = 2 covers M up to 16), fp32 accumulation. The k order inside a 32-wide chunk is
// permuted identically for weight and activation, so each lane feeds the tensor core straight from its own
// 16-byte loads. Each pass loads U chunks per lane from clamped addresses without branches (so all its loads
// can be in flight at once) and masks what lies outside the matrix. Partial sums meet in shared memory; across a cluster, through distributed shared memory in a fixed
// rank order: deterministic, no atomics, no workspace, one launch.
// HIP path (and a CUDA variant for comparison): plain FMA, each block owns ROWS rows, wave reduction.
#pragma once

#include "ib_compat.h"

#if !IB_HIP
#include <cooperative_groups.h>

#include <atomic>
#endif

namespace imagebuild {

inline constexpr int kSkinnyMaxM = 16;

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
// Weight load, evict-first; HINT adds a 256-byte L2 prefetch size (neighbouring warps read the next bytes).
template <int HINT>
IB_DEVICE uint4 ld_weight_v(const void* p) {
  uint4 v;
  if constexpr (HINT != 0) {
    asm("ld.global.cs.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  }
  return v;
}

IB_DEVICE uint4 ld_act_v(const void* p) {
  uint4 v;
  asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

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

// Partial sums of the block's warps meet in shared memory; with a K split, the cluster's blocks add theirs in
// rank order through distributed shared memory. Writes out (+ bias).
template <typename T, int WARPS, int RT, int MT>
IB_DEVICE void skinny_reduce_emit(const float (&acc)[MT][RT][4], T* __restrict__ out, const T* __restrict__ bias,
                                  int M, int N, int n0, int splits) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int V = MT * RT * 4;  // accumulator values per lane
  __shared__ float red[WARPS][V][32];
  __shared__ float part[V * 32];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int j = 0; j < 4; ++j) red[warp][(t * RT + r) * 4 + j][lane] = acc[t][r][j];
  __syncthreads();
  // Value idx = v * 32 + l holds acc[t][r][j] of lane l, v = (t * RT + r) * 4 + j:
  // out[m = 8t + 2(l % 4) + (j & 1)][n = n0 + 16r + l / 4 + 8(j >> 1)].
  auto emit = [&](int idx, float s) {
    const int v = idx / 32;
    const int l = idx % 32;
    const int t = v / (RT * 4);
    const int r = (v / 4) % RT;
    const int j = v % 4;
    const int m = 8 * t + 2 * (l % 4) + (j & 1);
    const int n = n0 + 16 * r + l / 4 + 8 * (j >> 1);
    if (m < M && n < N) {
      if (bias != nullptr) s += Convert<T>::to_float(bias[n]);
      out[static_cast<int64_t>(m) * N + n] = Convert<T>::from_float(s);
    }
  };
  for (int idx = threadIdx.x; idx < V * 32; idx += WARPS * 32) {
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < WARPS; ++wi) s += red[wi][idx / 32][idx % 32];
    if (splits == 1) {
      emit(idx, s);
    } else {
      part[idx] = s;
    }
  }
  if (splits > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's partial sums are in its shared memory
    const int rank = static_cast<int>(cluster.block_rank());
    for (int idx = rank * WARPS * 32 + threadIdx.x; idx < V * 32; idx += splits * WARPS * 32) {
      float s = 0.f;
      for (int j = 0; j < splits; ++j) s += cluster.map_shared_rank(part, j)[idx];  // fixed order: deterministic
      emit(idx, s);
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
#endif
  }
}

// Requires K % 8 == 0 and 16-byte aligned x and w (checked by the launcher). gridDim.y is the K split S: block
// (bx, s) covers the s-th contiguous range of 32-wide k chunks; S > 1 only in a (1, S, 1) cluster on sm_90.
template <typename T, int WARPS, int RT, int U, int MT, int HINT>
__global__ void __launch_bounds__(WARPS * 32)
    skinny_mma_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                      const T* __restrict__ bias, int M, int N, int K) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // tile row (and activation row) this lane loads
  const int q = lane % 4;  // which 8-wide slice of a 32-wide k chunk
  const int n0 = blockIdx.x * 16 * RT;
  const int nchunks = (K + 31) / 32;
  const int splits = gridDim.y;
  const int per_split = (nchunks + splits - 1) / splits;
  const int c_begin = blockIdx.y * per_split;
  const int c_end = min(nchunks, c_begin + per_split);

  float acc[MT][RT][4];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[t][r][0] = acc[t][r][1] = acc[t][r][2] = acc[t][r][3] = 0.f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  const T* w_lo[RT];
  const T* w_hi[RT];
  bool ok_lo[RT], ok_hi[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int row = n0 + r * 16 + g;
    ok_lo[r] = row < N;
    ok_hi[r] = row + 8 < N;
    w_lo[r] = w + static_cast<int64_t>(ok_lo[r] ? row : N - 1) * K;
    w_hi[r] = w + static_cast<int64_t>(ok_hi[r] ? row + 8 : N - 1) * K;
  }
  const T* x_row[MT];
  bool ok_x[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    ok_x[t] = 8 * t + g < M;
    x_row[t] = x + static_cast<int64_t>(ok_x[t] ? 8 * t + g : 0) * K;
  }

  for (int kc0 = c_begin + warp; kc0 < c_end; kc0 += WARPS * U) {
    uint4 wl[U][RT], wh[U][RT], xa[U][MT];
    // Unconditional loads from clamped addresses (bytes this warp reads anyway), masked afterwards: one basic
    // block, so the compiler can issue every load of the pass before the first multiply.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = kc0 + u * WARPS;
      const int k = min(c, c_end - 1) * 32 + q * 8;
      const int kk = min(k, K - 8);
      const bool ok_k = c < c_end && k < K;
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        wl[u][r] = ld_weight_v<HINT>(w_lo[r] + kk);
        wh[u][r] = ld_weight_v<HINT>(w_hi[r] + kk);
        if (!(ok_k && ok_lo[r])) wl[u][r] = zero;
        if (!(ok_k && ok_hi[r])) wh[u][r] = zero;
      }
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        xa[u][t] = ld_act_v(x_row[t] + kk);
        if (!(ok_k && ok_x[t])) xa[u][t] = zero;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          mma_16816<T>(acc[t][r], wl[u][r].x, wh[u][r].x, wl[u][r].y, wh[u][r].y, xa[u][t].x, xa[u][t].y);
          mma_16816<T>(acc[t][r], wl[u][r].z, wh[u][r].z, wl[u][r].w, wh[u][r].w, xa[u][t].z, xa[u][t].w);
        }
      }
    }
  }

  skinny_reduce_emit<T, WARPS, RT, MT>(acc, out, bias, M, N, n0, splits);
}

// Staged variant (sm_80+): the same tiles, mma and reduction, but a lane's 16-byte weight and activation pieces
// travel by cp.async into its own slots of a per-warp ring of STAGES passes in shared memory, so STAGES - 1 passes
// stay in flight while one is multiplied, without holding them in registers. A lane reads back only the slots it
// wrote, so the ring needs no barrier: cp.async.wait_group alone orders it. Weights: .cg (L2 only), evict-first,
// 256-byte L2 prefetch; activations: .ca.
template <int STAGES_LEFT>
IB_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES_LEFT) : "memory");
}

IB_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

IB_DEVICE void cp_async_weight(uint32_t dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "l"(policy)
               : "memory");
}

IB_DEVICE void cp_async_act(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

IB_DEVICE uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
               : "memory");
  return v;
}

template <int WARPS, int RT, int U, int MT, int STAGES>
constexpr int skinny_async_smem() {
  return WARPS * STAGES * U * (2 * RT + MT) * 32 * 16;
}

template <typename T, int WARPS, int RT, int U, int MT, int STAGES>
__global__ void __launch_bounds__(WARPS * 32)
    skinny_async_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                        const T* __restrict__ bias, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the launcher refuses these variants below sm_80
#else
  extern __shared__ __align__(16) unsigned char ring_raw[];
  constexpr int SLOTS = 2 * RT + MT;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int q = lane % 4;
  const int n0 = blockIdx.x * 16 * RT;
  const int nchunks = (K + 31) / 32;
  const int splits = gridDim.y;
  const int per_split = (nchunks + splits - 1) / splits;
  const int c_begin = blockIdx.y * per_split;
  const int c_end = min(nchunks, c_begin + per_split);
  // This warp's chunks: c_begin + warp + i * WARPS, i < mine; pass p holds i in [p * U, p * U + U).
  const int mine = c_end - c_begin - warp > 0 ? (c_end - c_begin - warp + WARPS - 1) / WARPS : 0;
  const int passes = (mine + U - 1) / U;
  // Slot (stage, u, j) of this lane: byte offset from ring.
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(ring_raw)) +
                        static_cast<uint32_t>(warp * STAGES * U * SLOTS * 32 + lane) * 16u;
  auto slot = [&](int stage, int u, int j) -> uint32_t {
    return ring + static_cast<uint32_t>(((stage * U + u) * SLOTS + j) * 32) * 16u;
  };
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));

  float acc[MT][RT][4];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[t][r][0] = acc[t][r][1] = acc[t][r][2] = acc[t][r][3] = 0.f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  const T* w_lo[RT];
  const T* w_hi[RT];
  bool ok_lo[RT], ok_hi[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int row = n0 + r * 16 + g;
    ok_lo[r] = row < N;
    ok_hi[r] = row + 8 < N;
    w_lo[r] = w + static_cast<int64_t>(ok_lo[r] ? row : N - 1) * K;
    w_hi[r] = w + static_cast<int64_t>(ok_hi[r] ? row + 8 : N - 1) * K;
  }
  const T* x_row[MT];
  bool ok_x[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    ok_x[t] = 8 * t + g < M;
    x_row[t] = x + static_cast<int64_t>(ok_x[t] ? 8 * t + g : 0) * K;
  }
  const int c_last = max(c_begin, c_end - 1);  // clamped chunk for passes past the end (never read back)

  auto issue = [&](int p) {
    if (p < passes) {
      const int stage = p % STAGES;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c_begin + warp + (p * U + u) * WARPS;
        const int kk = min(min(c, c_last) * 32 + q * 8, K - 8);
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          cp_async_weight(slot(stage, u, 2 * r), w_lo[r] + kk, policy);
          cp_async_weight(slot(stage, u, 2 * r + 1), w_hi[r] + kk, policy);
        }
#pragma unroll
        for (int t = 0; t < MT; ++t) cp_async_act(slot(stage, u, 2 * RT + t), x_row[t] + kk);
      }
    }
    cp_async_commit();  // one group per pass, empty past the end, so wait_group counts passes
  };

#pragma unroll
  for (int p = 0; p < STAGES - 1; ++p) issue(p);
  for (int p = 0; p < passes; ++p) {
    issue(p + STAGES - 1);
    cp_async_wait<STAGES - 1>();
    const int stage = p % STAGES;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + warp + (p * U + u) * WARPS;
      const bool ok_k = c < c_end && c * 32 + q * 8 < K;
      uint4 wl[RT], wh[RT], xa[MT];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        wl[r] = ld_shared_v4(slot(stage, u, 2 * r));
        wh[r] = ld_shared_v4(slot(stage, u, 2 * r + 1));
        if (!(ok_k && ok_lo[r])) wl[r] = zero;
        if (!(ok_k && ok_hi[r])) wh[r] = zero;
      }
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        xa[t] = ld_shared_v4(slot(stage, u, 2 * RT + t));
        if (!(ok_k && ok_x[t])) xa[t] = zero;
      }
#pragma unroll
      for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          mma_16816<T>(acc[t][r], wl[r].x, wh[r].x, wl[r].y, wh[r].y, xa[t].x, xa[t].y);
          mma_16816<T>(acc[t][r], wl[r].z, wh[r].z, wl[r].w, wh[r].w, xa[t].z, xa[t].w);
        }
      }
    }
  }
  cp_async_wait<0>();  // nothing of this block's copies still lands in shared memory after it exits

  skinny_reduce_emit<T, WARPS, RT, MT>(acc, out, bias, M, N, n0, splits);
#endif
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

// True when the kernels can take the problem; otherwise the caller uses the library GEMM.
template <typename T>
bool skinny_supported(const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= kSkinnyMaxM && N >= 1 && K >= 8 && K % 8 == 0 && N < (1LL << 31) &&
         K < (1LL << 31) && N * K < (1LL << 62) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// A launch configuration: cfg = 100 * split + variant (split 1, 2, 4 or 8; cfg < 100 means split 1).
// Variants (warps per block, 16-row tiles per block, unroll, L2 256-byte prefetch hint); 6 is the FMA kernel;
// 20-23 the cp.async-staged kernel (warps, tiles, chunks per pass, stages), sm_80+.
// imagebuild_kernels/_table.py mirrors this list (a test compares them).
inline constexpr int kSkinnyVariants = 23;
inline constexpr int kSkinnyMaxSplit = 8;

inline int skinny_variant(int cfg) { return cfg % 100; }
inline int skinny_split(int cfg) { return cfg < 100 ? 1 : cfg / 100; }
inline bool skinny_cfg_valid(int cfg) {
  const int v = skinny_variant(cfg);
  const int s = skinny_split(cfg);
  return cfg >= 1 && v >= 1 && v <= kSkinnyVariants && (s == 1 || s == 2 || s == 4 || s == 8) &&
         !(v == 6 && s != 1);
}

template <typename T, int WARPS, int RT, int U, int MT, int HINT>
ib_error_t launch_skinny_mma_mt(T* out, const T* x, const T* w, const T* bias, int M, int N, int K, int split,
                                ib_stream_t stream) {
#if IB_HIP
  (void)out, (void)x, (void)w, (void)bias, (void)M, (void)N, (void)K, (void)split, (void)stream;
  return hipErrorNotSupported;
#else
  const dim3 grid((N + 16 * RT - 1) / (16 * RT), split);
  auto* kernel = skinny_mma_kernel<T, WARPS, RT, U, MT, HINT>;
  if (split == 1) {
    kernel<<<grid, WARPS * 32, 0, stream>>>(out, x, w, bias, M, N, K);
    return IB_GET_LAST_ERROR();
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = dim3(WARPS * 32);
  lc.dynamicSmemBytes = 0;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = split;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  return cudaLaunchKernelEx(&lc, kernel, out, x, w, bias, M, N, K);
#endif
}

template <typename T, int WARPS, int RT, int U, int HINT>
ib_error_t launch_skinny_mma(T* out, const T* x, const T* w, const T* bias, int M, int N, int K, int split,
                             ib_stream_t stream) {
  if (M > 8) return launch_skinny_mma_mt<T, WARPS, RT, U, 2, HINT>(out, x, w, bias, M, N, K, split, stream);
  return launch_skinny_mma_mt<T, WARPS, RT, U, 1, HINT>(out, x, w, bias, M, N, K, split, stream);
}

template <typename T, int WARPS, int RT, int U, int MT, int STAGES>
ib_error_t launch_skinny_async_mt(T* out, const T* x, const T* w, const T* bias, int M, int N, int K, int split,
                                  ib_stream_t stream) {
#if IB_HIP
  (void)out, (void)x, (void)w, (void)bias, (void)M, (void)N, (void)K, (void)split, (void)stream;
  return hipErrorNotSupported;
#else
  constexpr int smem = skinny_async_smem<WARPS, RT, U, MT, STAGES>();
  auto* kernel = skinny_async_kernel<T, WARPS, RT, U, MT, STAGES>;
  {
    // Static plus dynamic shared memory past 48 KB needs an opt-in, per device; remembered per device (bit d).
    static std::atomic<uint64_t> opted{0};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const uint64_t bit = dev < 64 ? (1ULL << dev) : 0;
    if (!(opted.load() & bit)) {
      int major = 0;
      e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
      if (e != cudaSuccess) return e;
      if (major < 8) return cudaErrorInvalidValue;  // cp.async needs sm_80+
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != cudaSuccess) return e;
      opted.fetch_or(bit);
    }
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3((N + 16 * RT - 1) / (16 * RT), split);
  lc.blockDim = dim3(WARPS * 32);
  lc.dynamicSmemBytes = smem;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = split;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = split > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&lc, kernel, out, x, w, bias, M, N, K);
#endif
}

template <typename T, int WARPS, int RT, int U, int STAGES>
ib_error_t launch_skinny_async(T* out, const T* x, const T* w, const T* bias, int M, int N, int K, int split,
                               ib_stream_t stream) {
  if (M > 8) return launch_skinny_async_mt<T, WARPS, RT, U, 2, STAGES>(out, x, w, bias, M, N, K, split, stream);
  return launch_skinny_async_mt<T, WARPS, RT, U, 1, STAGES>(out, x, w, bias, M, N, K, split, stream);
}

template <typename T>
ib_error_t launch_skinny_fma(T* out, const T* x, const T* w, const T* bias, int M, int N, int K,
                             ib_stream_t stream) {
  constexpr int ROWS = 4;
  constexpr int THREADS = 256;
  skinny_fma_kernel<T, ROWS, THREADS><<<(N + ROWS - 1) / ROWS, THREADS, 0, stream>>>(out, x, w, bias, M, N, K);
  return IB_GET_LAST_ERROR();
}

// Launches configuration cfg (>= 1, see above; the choice per shape is made by the caller from the measured
// table). Caller checked skinny_supported(). out is [M, N] contiguous; bias is null or [N]. clusters: the
// device runs thread-block clusters (sm_90+); without them a split > 1 is refused.
template <typename T>
ib_error_t launch_skinny_linear(T* out, const T* x, const T* w, const T* bias, int M, int N, int K, int cfg,
                                bool clusters, ib_stream_t stream) {
#if IB_HIP
  (void)clusters;
  if (!skinny_cfg_valid(cfg)) return hipErrorInvalidValue;
  return launch_skinny_fma<T>(out, x, w, bias, M, N, K, stream);
#else
  if (!skinny_cfg_valid(cfg)) return cudaErrorInvalidValue;
  const int s = skinny_split(cfg);
  if (s > 1 && !clusters) return cudaErrorInvalidValue;
  switch (skinny_variant(cfg)) {
    case 1: return launch_skinny_mma<T, 8, 1, 4, 0>(out, x, w, bias, M, N, K, s, stream);
    case 2: return launch_skinny_mma<T, 8, 2, 2, 0>(out, x, w, bias, M, N, K, s, stream);
    case 3: return launch_skinny_mma<T, 4, 1, 4, 0>(out, x, w, bias, M, N, K, s, stream);
    case 4: return launch_skinny_mma<T, 8, 1, 2, 0>(out, x, w, bias, M, N, K, s, stream);
    case 5: return launch_skinny_mma<T, 4, 2, 4, 0>(out, x, w, bias, M, N, K, s, stream);
    case 6: return launch_skinny_fma<T>(out, x, w, bias, M, N, K, stream);
    case 7: return launch_skinny_mma<T, 16, 1, 2, 0>(out, x, w, bias, M, N, K, s, stream);
    case 8: return launch_skinny_mma<T, 8, 1, 8, 0>(out, x, w, bias, M, N, K, s, stream);
    case 9: return launch_skinny_mma<T, 16, 1, 4, 0>(out, x, w, bias, M, N, K, s, stream);
    case 10: return launch_skinny_mma<T, 32, 1, 2, 0>(out, x, w, bias, M, N, K, s, stream);
    case 11: return launch_skinny_mma<T, 4, 1, 8, 0>(out, x, w, bias, M, N, K, s, stream);
    case 12: return launch_skinny_mma<T, 8, 1, 4, 1>(out, x, w, bias, M, N, K, s, stream);
    case 13: return launch_skinny_mma<T, 4, 2, 4, 1>(out, x, w, bias, M, N, K, s, stream);
    case 14: return launch_skinny_mma<T, 16, 1, 4, 1>(out, x, w, bias, M, N, K, s, stream);
    case 15: return launch_skinny_mma<T, 4, 1, 8, 1>(out, x, w, bias, M, N, K, s, stream);
    case 16: return launch_skinny_mma<T, 16, 1, 2, 1>(out, x, w, bias, M, N, K, s, stream);
    case 17: return launch_skinny_mma<T, 32, 1, 2, 1>(out, x, w, bias, M, N, K, s, stream);
    case 18: return launch_skinny_mma<T, 8, 2, 2, 1>(out, x, w, bias, M, N, K, s, stream);
    case 19: return launch_skinny_mma<T, 8, 1, 8, 1>(out, x, w, bias, M, N, K, s, stream);
    case 20: return launch_skinny_async<T, 4, 1, 2, 4>(out, x, w, bias, M, N, K, s, stream);
    case 21: return launch_skinny_async<T, 8, 1, 1, 4>(out, x, w, bias, M, N, K, s, stream);
    case 22: return launch_skinny_async<T, 4, 2, 1, 4>(out, x, w, bias, M, N, K, s, stream);
    case 23: return launch_skinny_async<T, 4, 1, 1, 8>(out, x, w, bias, M, N, K, s, stream);
    default: return cudaErrorInvalidValue;
  }
#endif
}

}  // namespace imagebuild
