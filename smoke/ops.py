"""Finding the image's custom ops (``torch.ops.imagebuild.*``), and whether their absence is a failure."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from imagecontract.targets import covers
from smoke.context import Context
from smoke.result import CheckResult

COMPONENT = "imagebuild-kernels"


def _import_kernels() -> str | None:
    """Import the Python package that registers the ops; returns why it failed, or None."""
    try:
        importlib.import_module("imagebuild_kernels")
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, never raised
        return f"import imagebuild_kernels failed: {type(exc).__name__}: {exc}"
    return None


def find_op(ctx: Context, name: str) -> tuple[Callable[..., Any] | None, str | None, bool]:
    """Return (op, why-not-tested, missing-is-failure).

    The manifest decides: if it includes the kernels component for this arch the op must be there; with no
    manifest (a bare host) a missing op is only skipped.
    """
    not_here = op_applies(ctx)
    if not_here:
        return None, not_here, False
    import_error = _import_kernels()
    op: Callable[..., Any] | None = None
    try:
        op = getattr(torch.ops.imagebuild, name)
    except (AttributeError, RuntimeError):
        op = None
    if op is not None:
        return op, None, False
    why = f"torch.ops.imagebuild.{name} is not registered" + (f" ({import_error})" if import_error else "")
    man = ctx.manifest
    if not man.present:
        return None, why + "; no manifest, so not required", False
    if not man.component_included(COMPONENT):
        return None, why + f"; the manifest does not include {COMPONENT}", False
    return None, why + f", but the manifest includes {COMPONENT}", True


def op_for_check(ctx: Context, res: CheckResult, name: str) -> Callable[..., Any] | None:
    """The image's op, or None with the reason recorded: a failure when the manifest promises it."""
    op, why, required = find_op(ctx, name)
    if op is None:
        res.numbers[name] = {"tested": False, "reason": why}
        if required:
            res.fail(str(why))
        else:
            res.warnings.append(f"{name} not tested: {why}")
    return op


def op_applies(ctx: Context) -> str | None:
    """Why the image's kernels are not expected on this device (built for other arches), or None."""
    man = ctx.manifest
    comp = man.component(COMPONENT) if man.present else None
    if not comp or not ctx.on_gpu:
        return None
    arches = comp.arches + comp.experimental
    if arches and not covers(arches, ctx.info.arch):  # the preflight's rule: sm_80 kernels run on sm_86
        return f"{COMPONENT} is built for {', '.join(arches)}, not {ctx.info.arch}"
    return None
