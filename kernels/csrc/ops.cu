// Torch bindings of the device code: input checks, dtype dispatch, stream, launch. The op schemas, the CPU
// implementations and the fake (meta) implementations live in Python (imagebuild_kernels/_ops.py); this file
// only adds the CUDA (on ROCm: HIP, after torch's hipify) implementations to the `imagebuild` library.
#include <Python.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "silu_and_mul.cuh"
#include "skinny_linear.cuh"

namespace imagebuild {
// Compiled in skinny_launch_f16.cu / skinny_launch_bf16.cu (separate files: they build in parallel).
extern template ib_error_t launch_skinny_linear<__half>(__half*, const __half*, const __half*, const __half*, int, int,
                                                       int, int, bool, ib_stream_t);
extern template ib_error_t launch_skinny_linear<bf16_t>(bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, int,
                                                        int, int, int, bool, ib_stream_t);
}  // namespace imagebuild

namespace {

using imagebuild::bf16_t;

void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, "imagebuild::", op, ": kernel launch failed: ", cudaGetErrorString(err));
}

// Multiprocessor count of the current device, read once per device.
int sm_count(int device) {
  static int cache[64] = {0};
  if (device < 0 || device >= 64) return 132;
  if (cache[device] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) n = 132;
    cache[device] = n;
  }
  return cache[device];
}

// "[4, 15]": shapes and strides in messages, formatted with std::to_string. Streaming an int64 into the check
// message (ArrayRef's operator<< does) crashed the process on the GPU machine's torch 2.11 image (seen twice,
// cause not established), so no integer goes through a stream here.
std::string dims(at::IntArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Compute capability as 10 * major + minor, read once per device.
int compute_capability(int device) {
  static int cache[64] = {0};
  if (device < 0 || device >= 64) return 0;
  if (cache[device] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    cache[device] = 10 * major + minor;
  }
  return cache[device];
}

// The measured dispatch table (imagebuild_kernels/skinny_table.json, installed by the Python package at import
// through _skinny_set_table). The rule is the one of imagebuild_kernels/_table.py `choose` (a GPU test compares
// them): no table for this GPU (compute capability and multiprocessor count) -> library; a (dtype, N, K) that was
// not measured -> library (no extrapolation: issue 24); a measured M -> its entry; an M between two measured M of
// the same half (<= 8 or > 8) -> the cfg of the one above when both chose ours, else library.
constexpr int kLibrary = -1;

struct SkinnyRow {
  int64_t dtype, n, k, m, cfg;
};

struct SkinnyTable {
  std::mutex mu;
  int64_t cc = -1, sms = -1;
  std::vector<SkinnyRow> rows;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int> cache;
};

SkinnyTable& skinny_table() {
  static SkinnyTable t;
  return t;
}

void skinny_set_table(const at::Tensor& rows, int64_t cc, int64_t sm_count) {
  const char* op = "imagebuild::_skinny_set_table";
  TORCH_CHECK_VALUE(rows.device().is_cpu() && rows.scalar_type() == at::kLong && rows.dim() == 2 &&
                        rows.size(1) == 5,
                    op, ": expected an int64 CPU tensor of shape [R, 5] (dtype, N, K, M, cfg), got ",
                    dims(rows.sizes()));
  const at::Tensor r = rows.contiguous();
  const int64_t* p = r.data_ptr<int64_t>();
  std::vector<SkinnyRow> v;
  for (int64_t i = 0; i < r.size(0); ++i) {
    const SkinnyRow row{p[5 * i], p[5 * i + 1], p[5 * i + 2], p[5 * i + 3], p[5 * i + 4]};
    TORCH_CHECK_VALUE(row.n >= 1 && row.k >= 1 && row.m >= 1 && row.m <= imagebuild::kSkinnyMaxM &&
                          (row.cfg == kLibrary || imagebuild::skinny_cfg_valid(static_cast<int>(row.cfg))),
                      op, ": bad row ", std::to_string(i));
    v.push_back(row);
  }
  SkinnyTable& t = skinny_table();
  const std::lock_guard<std::mutex> lock(t.mu);
  t.cc = cc;
  t.sms = sm_count;
  t.rows = std::move(v);
  t.cache.clear();
}

int skinny_lookup(const std::vector<SkinnyRow>& rows, int64_t dtype, int64_t n, int64_t k, int64_t m) {
  const bool high = m > 8;
  const SkinnyRow* above = nullptr;
  const SkinnyRow* below = nullptr;
  for (const SkinnyRow& r : rows) {
    if (r.dtype != dtype || r.n != n || r.k != k || (r.m > 8) != high) continue;
    if (r.m == m) return static_cast<int>(r.cfg);
    if (r.m > m && (above == nullptr || r.m < above->m)) above = &r;
    if (r.m < m && (below == nullptr || r.m > below->m)) below = &r;
  }
  if (above == nullptr || below == nullptr || above->cfg == kLibrary || below->cfg == kLibrary) return kLibrary;
  return static_cast<int>(above->cfg);
}

// cfg for skinny_linear on this device and shape: >= 1 a launch configuration, kLibrary for at::linear.
int skinny_choice(int device, int64_t dtype, int64_t n, int64_t k, int64_t m) {
  SkinnyTable& t = skinny_table();
  const std::lock_guard<std::mutex> lock(t.mu);
  if (t.cc != compute_capability(device) || t.sms != sm_count(device)) return kLibrary;
  const auto key = std::make_tuple(dtype, n, k, m);
  auto it = t.cache.find(key);
  if (it != t.cache.end()) return it->second;
  const int cfg = skinny_lookup(t.rows, dtype, n, k, m);
  t.cache.emplace(key, cfg);
  return cfg;
}

void check_silu_args(const at::Tensor& out, const at::Tensor& x) {
  const char* op = "imagebuild::silu_and_mul";
  TORCH_CHECK_VALUE(x.is_cuda(), op, ": expected x on a GPU, got ", x.device());
  TORCH_CHECK_VALUE(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf ||
                        x.scalar_type() == at::kBFloat16,
                    op, ": expected x of dtype float16, bfloat16 or float32, got ", x.scalar_type());
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) % 2 == 0, op,
                    ": expected x of shape [..., 2*d] (last dim even), got ", dims(x.sizes()));
  TORCH_CHECK_VALUE(x.is_contiguous(), op, ": expected a contiguous x, got strides ", dims(x.strides()));
  TORCH_CHECK_VALUE(out.device() == x.device(), op, ": expected out on ", x.device(), ", got ", out.device());
  TORCH_CHECK_VALUE(out.scalar_type() == x.scalar_type(), op, ": expected out of dtype ", x.scalar_type(),
                    ", got ", out.scalar_type());
  auto want = x.sizes().vec();
  want.back() /= 2;
  TORCH_CHECK_VALUE(out.sizes().vec() == want, op, ": expected out of shape ", dims(want), ", got ",
                    dims(out.sizes()));
  TORCH_CHECK_VALUE(out.is_contiguous(), op, ": expected a contiguous out, got strides ", dims(out.strides()));
}

void silu_and_mul_cfg(at::Tensor& out, const at::Tensor& x, int64_t cfg) {
  check_silu_args(out, x);
  const int64_t d = x.size(-1) / 2;
  const int64_t tokens = d == 0 ? 0 : x.numel() / (2 * d);
  if (tokens == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int sms = sm_count(x.get_device());
  cudaError_t err = cudaSuccess;
  switch (x.scalar_type()) {
    case at::kFloat:
      err = imagebuild::launch_silu_and_mul<float>(out.data_ptr<float>(), x.data_ptr<float>(), tokens, d,
                                                   static_cast<int>(cfg), sms, stream);
      break;
    case at::kHalf:
      err = imagebuild::launch_silu_and_mul<__half>(reinterpret_cast<__half*>(out.data_ptr<at::Half>()),
                                                    reinterpret_cast<const __half*>(x.data_ptr<at::Half>()),
                                                    tokens, d, static_cast<int>(cfg), sms, stream);
      break;
    default:
      err = imagebuild::launch_silu_and_mul<bf16_t>(
          reinterpret_cast<bf16_t*>(out.data_ptr<at::BFloat16>()),
          reinterpret_cast<const bf16_t*>(x.data_ptr<at::BFloat16>()), tokens, d, static_cast<int>(cfg), sms,
          stream);
  }
  check_launch(err, "silu_and_mul");
}

void silu_and_mul_out(at::Tensor& out, const at::Tensor& x) { silu_and_mul_cfg(out, x, 0); }

at::Tensor silu_and_mul(const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() >= 1, "imagebuild::silu_and_mul: expected x of shape [..., 2*d], got ", dims(x.sizes()));
  auto shape = x.sizes().vec();
  shape.back() /= 2;
  at::Tensor out = at::empty(shape, x.options());
  silu_and_mul_cfg(out, x, 0);
  return out;
}

at::Tensor skinny_linear_cfg(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                             int64_t cfg) {
  const char* op = "imagebuild::skinny_linear";
  TORCH_CHECK_VALUE(x.is_cuda(), op, ": expected x on a GPU, got ", x.device());
  TORCH_CHECK_VALUE(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op,
                    ": expected x of dtype float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK_VALUE(weight.scalar_type() == x.scalar_type(), op, ": expected weight of dtype ", x.scalar_type(),
                    ", got ", weight.scalar_type());
  TORCH_CHECK_VALUE(weight.device() == x.device(), op, ": expected weight on ", x.device(), ", got ",
                    weight.device());
  TORCH_CHECK_VALUE(x.dim() == 2, op, ": expected x of shape [M, K], got ", dims(x.sizes()));
  TORCH_CHECK_VALUE(weight.dim() == 2 && weight.size(1) == x.size(1), op, ": expected weight of shape [N, ",
                    std::to_string(x.size(1)), "], got ", dims(weight.sizes()));
  TORCH_CHECK_VALUE(x.is_contiguous(), op, ": expected a contiguous x, got strides ", dims(x.strides()));
  TORCH_CHECK_VALUE(weight.is_contiguous(), op, ": expected a contiguous weight, got strides ", dims(weight.strides()));
  if (bias.has_value()) {
    const at::Tensor& b = *bias;
    TORCH_CHECK_VALUE(b.scalar_type() == x.scalar_type(), op, ": expected bias of dtype ", x.scalar_type(),
                      ", got ", b.scalar_type());
    TORCH_CHECK_VALUE(b.device() == x.device(), op, ": expected bias on ", x.device(), ", got ", b.device());
    TORCH_CHECK_VALUE(b.dim() == 1 && b.size(0) == weight.size(0), op, ": expected bias of shape [",
                      std::to_string(weight.size(0)), "], got ", dims(b.sizes()));
    TORCH_CHECK_VALUE(b.is_contiguous(), op, ": expected a contiguous bias, got strides ", dims(b.strides()));
  }
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  const bool half = x.scalar_type() == at::kHalf;
  const bool ok = half ? imagebuild::skinny_supported(x.data_ptr<at::Half>(), weight.data_ptr<at::Half>(), M, N, K)
                       : imagebuild::skinny_supported(x.data_ptr<at::BFloat16>(), weight.data_ptr<at::BFloat16>(),
                                                      M, N, K);
  if (M == 0 || N == 0) return at::empty({M, N}, x.options());
  const int device = x.get_device();
  if (ok && cfg == 0) cfg = skinny_choice(device, half ? 0 : 1, N, K, M);
  if (!ok || cfg == kLibrary) return at::linear(x, weight, bias);
  at::Tensor out = at::empty({M, N}, x.options());
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const bool clusters = compute_capability(device) >= 90;
  cudaError_t err = cudaSuccess;
  if (half) {
    auto* bp = bias.has_value() ? reinterpret_cast<const __half*>(bias->data_ptr<at::Half>()) : nullptr;
    err = imagebuild::launch_skinny_linear<__half>(
        reinterpret_cast<__half*>(out.data_ptr<at::Half>()), reinterpret_cast<const __half*>(x.data_ptr<at::Half>()),
        reinterpret_cast<const __half*>(weight.data_ptr<at::Half>()), bp, static_cast<int>(M), static_cast<int>(N),
        static_cast<int>(K), static_cast<int>(cfg), clusters, stream);
  } else {
    auto* bp = bias.has_value() ? reinterpret_cast<const bf16_t*>(bias->data_ptr<at::BFloat16>()) : nullptr;
    err = imagebuild::launch_skinny_linear<bf16_t>(
        reinterpret_cast<bf16_t*>(out.data_ptr<at::BFloat16>()),
        reinterpret_cast<const bf16_t*>(x.data_ptr<at::BFloat16>()),
        reinterpret_cast<const bf16_t*>(weight.data_ptr<at::BFloat16>()), bp, static_cast<int>(M),
        static_cast<int>(N), static_cast<int>(K), static_cast<int>(cfg), clusters, stream);
  }
  if (err == cudaErrorInvalidValue) {
    (void)cudaGetLastError();
    TORCH_CHECK_VALUE(false, op, ": launch configuration ", std::to_string(cfg), " is not valid here");
  }
  check_launch(err, "skinny_linear");
  return out;
}

// What skinny_linear(x, weight) would run: a launch configuration (>= 1) or -1 (the library GEMM).
int64_t skinny_choice_op(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK_VALUE(x.is_cuda() && x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
                    "imagebuild::_skinny_choice: expected x [M, K] and weight [N, K] on a GPU");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  const bool half = x.scalar_type() == at::kHalf;
  if (!half && x.scalar_type() != at::kBFloat16) return kLibrary;
  const bool ok = half ? imagebuild::skinny_supported(x.data_ptr<at::Half>(), weight.data_ptr<at::Half>(), M, N, K)
                       : imagebuild::skinny_supported(x.data_ptr<at::BFloat16>(), weight.data_ptr<at::BFloat16>(),
                                                      M, N, K);
  if (!ok) return kLibrary;
  return skinny_choice(x.get_device(), half ? 0 : 1, N, K, M);
}

at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  return skinny_linear_cfg(x, weight, bias, 0);
}

}  // namespace

TORCH_LIBRARY_IMPL(imagebuild, CUDA, m) {
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("silu_and_mul_out", &silu_and_mul_out);
  m.impl("skinny_linear", &skinny_linear);
  m.impl("_silu_and_mul_cfg", &silu_and_mul_cfg);
  m.impl("_skinny_linear_cfg", &skinny_linear_cfg);
  m.impl("_skinny_choice", &skinny_choice_op);
}

TORCH_LIBRARY_IMPL(imagebuild, CPU, m) { m.impl("_skinny_set_table", &skinny_set_table); }

// A plain extension module, so `import imagebuild_kernels._C` loads the registrations above.
PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "imagebuild CUDA/HIP kernels", -1, nullptr};
  return PyModule_Create(&def);
}
