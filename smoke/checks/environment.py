"""Is the GPU there, is it one the image was built for, and are torch and its runtime the promised ones."""

from __future__ import annotations

import re
from pathlib import Path

from imagecontract import kinds
from imagecontract.driver import driver_version as read_driver_version
from imagecontract.driver import min_driver
from imagecontract.targets import covers
from smoke import torch_names
from smoke.context import Context
from smoke.device import gfx_from_override
from smoke.result import CheckResult


def release(version: str | None) -> tuple[int, ...]:
    """Leading numeric release: '2.3.0a0+git1' -> (2, 3, 0), '6.1.40093-bd86' -> (6, 1, 40093)."""
    match = re.match(r"\d+(\.\d+)*", version or "")
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def same_version(found: str | None, expected: str) -> bool:
    """``found`` agrees with ``expected`` in every component ``expected`` gives (6.1 matches 6.1.40093)."""
    want, have = release(expected), release(found)
    return bool(want) and have[: len(want)] == want


def driver_version(vendor: str, root: str = "/") -> str | None:
    """The loaded kernel driver's version (the NVIDIA kernel module, the amdgpu module), None when unreadable:
    the vendor's platform kind says where (imagecontract.kinds), imagecontract.driver reads it bounded."""
    kind = kinds.for_vendor(vendor)
    return read_driver_version(Path(root), kind.DRIVER_FILE, kind.DRIVER_VERSION)


def check_driver(minimum: str | None, vendor: str, res: CheckResult, root: str = "/") -> None:
    """The manifest's platform.min_driver against the loaded driver: older fails, unreadable is a warning (the
    one check, imagecontract.driver.min_driver, that the preflight and doctor run too)."""
    if not minimum:
        return
    live = driver_version(vendor, root)
    res.numbers["driver_version"] = live
    said = min_driver(minimum, live, vendor)
    if said is not None and said[0] == "fail":
        res.fail(said[1])
    elif said is not None:
        res.warnings.append(said[1])


def run(ctx: Context) -> CheckResult:
    res = CheckResult("environment")
    info, man = ctx.info, ctx.manifest
    res.numbers.update(
        {
            "device": info.device,
            "device_requested": info.requested,
            "gpu_visible": info.gpu_visible,
            "arch": info.arch,
            "gpu_name": info.name,
            "vendor": info.vendor,
            "native_arch": info.native_arch,
            "torch_arch_list": info.torch_arches,
            "versions": info.versions,
            "image_arches": man.gpu_arches,
            "image_experimental_arches": man.experimental_arches,
            "kernels_json": man.kernels,
        }
    )
    _check_gpu(ctx, res)
    _check_versions(ctx, res)
    return res.finish()


def _check_gpu(ctx: Context, res: CheckResult) -> None:
    info, man = ctx.info, ctx.manifest
    if not ctx.on_gpu:
        if info.requested == torch_names.GPU:
            res.fail("--device cuda asked for a GPU but torch sees none (torch.cuda.is_available() is False)")
        elif info.requested == "auto" and ctx.gpu_expected():
            res.fail(f"no GPU visible, but the image was built for {', '.join(man.image_arches())}")
        elif ctx.gpu_expected():
            res.warnings.append("running on cpu (--device cpu): the GPU checks of this image did not run")
        return
    if info.probe_error:
        res.fail(f"the GPU is visible but could not be queried: {info.probe_error}")
        return
    # Every "runs on" below is the preflight's rule (imagecontract.targets.covers): AMD by LLVM's target ID rule
    # (the processor, or a generic target holding it, and the features the code fixes); CUDA by its cubin rule (an
    # sm_80 cubin runs on sm_86), `a` (its compute capability only), `f` (its family) and PTX JIT (forward).
    if man.present:
        coverage = man.coverage(info.arch)  # which image arch's code runs on the device, and how
        res.numbers["arch_coverage"] = {"image_arch": coverage[0], "runs": coverage[1]} if coverage else None
        if not man.image_arches():
            res.fail(f"a GPU ({info.arch}) is visible but the image was built for no GPU arch (cpu image)")
        elif not man.supports(info.arch):
            res.fail(
                f"device arch {info.arch} is not among the arches the image was built for: "
                f"{', '.join(man.image_arches())}"
            )
        elif not covers(man.gpu_arches, info.arch):
            res.warnings.append(f"device arch {info.arch} is experimental in this image")
    else:
        res.warnings.append("no manifest: the device arch was not checked against the image's arches")
    if info.torch_arches and not covers(info.torch_arches, info.arch):
        res.warnings.append(f"torch was compiled for {', '.join(info.torch_arches)}, not for {info.arch}")
    kernels = man.kernels_report
    if kernels is not None:
        objects = [*kernels.code_objects, *kernels.ptx]  # PTX (compute_XY) runs forward by JIT: coverage too
        if not covers(objects, info.arch):
            res.fail(
                f"kernels.json: {kernels.library} holds code objects for "
                f"{', '.join(objects) or 'none'}, "
                f"not for device arch {info.arch}"
            )
    check_driver(man.doc.platform.min_driver if man.doc else None, info.vendor, res)
    _check_override(ctx, res)


def _check_override(ctx: Context, res: CheckResult) -> None:
    """A leftover ``HSA_OVERRIDE_GFX_VERSION`` makes the GPU run code for another arch: flag it."""
    info, man = ctx.info, ctx.manifest
    if not info.hsa_override or info.vendor != "amd":
        return
    res.numbers["hsa_override_gfx_version"] = info.hsa_override
    res.numbers["override_arch"] = gfx_from_override(info.hsa_override)
    native = info.native_arch
    if native is None:
        res.warnings.append(
            f"HSA_OVERRIDE_GFX_VERSION={info.hsa_override} is set and the native arch is unknown "
            "(no KFD topology): the GPU may be running code for another arch"
        )
    elif not man.present or man.supports(native):
        res.warnings.append(
            f"HSA_OVERRIDE_GFX_VERSION={info.hsa_override} is set although the native arch {native} is "
            "supported by this image: unset it"
        )


def _check_versions(ctx: Context, res: CheckResult) -> None:
    info, man = ctx.info, ctx.manifest
    want = man.versions
    if want is None:
        return
    have = info.versions
    # the manifest names a GPU toolkit after its platform kind, torch.version after the toolkit (rocm: hip)
    toolkits = [(kind.NAME, str(kind.TORCH_VERSION)) for kind in kinds.GPU_KINDS]
    pairs = [("torch", "torch"), *toolkits, ("python", "python")]
    for key, have_key in pairs:
        expected = getattr(want, key)
        if expected is None:
            continue
        found = have.get(have_key)
        if not same_version(found, str(expected)):
            res.fail(f"{key} version {found} does not equal the manifest's {expected}")
