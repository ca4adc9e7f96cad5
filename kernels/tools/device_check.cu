// Compiles the device code alone (no torch) for every requested arch; CI builds it with clang (HIP, gfx*)
// and nvcc (sm_*), then lists the code objects of the result with `imagebuild kernels verify`.
#include "../csrc/silu_and_mul.cuh"
#include "../csrc/skinny_linear.cuh"

namespace imagebuild {
template ib_error_t launch_silu_and_mul<float>(float*, const float*, int64_t, int64_t, int, int, ib_stream_t);
template ib_error_t launch_silu_and_mul<__half>(__half*, const __half*, int64_t, int64_t, int, int, ib_stream_t);
template ib_error_t launch_silu_and_mul<bf16_t>(bf16_t*, const bf16_t*, int64_t, int64_t, int, int, ib_stream_t);
template ib_error_t launch_skinny_linear<__half>(__half*, const __half*, const __half*, const __half*, int, int,
                                                 int, int, bool, ib_stream_t);
template ib_error_t launch_skinny_linear<bf16_t>(bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, int, int,
                                                 int, int, bool, ib_stream_t);
}  // namespace imagebuild
