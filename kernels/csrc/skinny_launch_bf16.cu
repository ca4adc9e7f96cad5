// The bf16_t instantiation of skinny_linear's launcher and kernels, in its own file so the dtypes compile in parallel.
#include "skinny_linear.cuh"

namespace imagebuild {
template ib_error_t launch_skinny_linear<bf16_t>(bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, int, int, int, int, bool,
                                             ib_stream_t);
}  // namespace imagebuild
