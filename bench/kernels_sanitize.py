"""Every kernel variant once on small odd shapes, for `compute-sanitizer` (out-of-bounds and race checks)."""

from __future__ import annotations

import imagebuild_kernels  # noqa: F401  (registers the ops)
import torch


def main() -> None:
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for shape in ((3, 26), (5, 2 * 1000), (2, 2 * 4096)):
            x = torch.randn(shape, device="cuda", dtype=dtype)
            out = torch.empty(shape[0], shape[1] // 2, device="cuda", dtype=dtype)
            for cfg in range(14):
                torch.ops.imagebuild._silu_and_mul_cfg(out, x, cfg)
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k in ((1, 17, 40), (3, 100, 264), (8, 257, 1000), (13, 4100, 2056), (16, 33, 4104)):
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            for cfg in [0, *range(1, 24), 201, 401, 801, 211, 812, 416, 218, 220, 421, 822, 223]:
                torch.ops.imagebuild._skinny_linear_cfg(x, w, b, cfg)
    torch.cuda.synchronize()
    print("sanitize run done")


if __name__ == "__main__":
    main()
