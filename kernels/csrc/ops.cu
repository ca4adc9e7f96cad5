// Torch bindings of the device code: input checks, dtype dispatch, stream, launch. The op schemas, the CPU
// implementations and the fake (meta) implementations live in Python (imagebuild_kernels/_ops.py); this file
// only adds the CUDA (on ROCm: HIP, after torch's hipify) implementations to the `imagebuild` library.
#include <Python.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "silu_and_mul.cuh"
#include "skinny_linear.cuh"

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
  at::Tensor out = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int sms = sm_count(x.get_device());
  cudaError_t err = cudaSuccess;
  if (x.scalar_type() == at::kHalf) {
    auto* xp = reinterpret_cast<const __half*>(x.data_ptr<at::Half>());
    auto* wp = reinterpret_cast<const __half*>(weight.data_ptr<at::Half>());
    if (!imagebuild::skinny_supported(xp, wp, M, N, K)) return at::linear(x, weight, bias);
    auto* bp = bias.has_value() ? reinterpret_cast<const __half*>(bias->data_ptr<at::Half>()) : nullptr;
    err = imagebuild::launch_skinny_linear<__half>(reinterpret_cast<__half*>(out.data_ptr<at::Half>()), xp, wp, bp,
                                                   static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                                                   static_cast<int>(cfg), sms, stream);
  } else {
    auto* xp = reinterpret_cast<const bf16_t*>(x.data_ptr<at::BFloat16>());
    auto* wp = reinterpret_cast<const bf16_t*>(weight.data_ptr<at::BFloat16>());
    if (!imagebuild::skinny_supported(xp, wp, M, N, K)) return at::linear(x, weight, bias);
    auto* bp = bias.has_value() ? reinterpret_cast<const bf16_t*>(bias->data_ptr<at::BFloat16>()) : nullptr;
    err = imagebuild::launch_skinny_linear<bf16_t>(reinterpret_cast<bf16_t*>(out.data_ptr<at::BFloat16>()), xp, wp,
                                                   bp, static_cast<int>(M), static_cast<int>(N),
                                                   static_cast<int>(K), static_cast<int>(cfg), sms, stream);
  }
  check_launch(err, "skinny_linear");
  return out;
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
}

// A plain extension module, so `import imagebuild_kernels._C` loads the registrations above.
PyMODINIT_FUNC PyInit__C(void) {
  static PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "imagebuild CUDA/HIP kernels", -1, nullptr};
  return PyModule_Create(&def);
}
