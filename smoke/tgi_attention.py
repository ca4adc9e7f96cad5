"""Whether TGI enables flash and paged attention, held against what the image manifest promised.

TGI decides at import time: text_generation_server/models/__init__.py (huggingface/text-generation-inference@232e8d52,
lines 50-87) logs a warning and sets FLASH_ATTENTION to False when any flash model module fails to import. At that
commit the server then imports the shared flash stack again outside any try (server.py:17-20, through
models/flash_mistral.py), so a missing compiled module stops it at start; only a failure no server import repeats
(fused_moe of Mixtral and DBRX) leaves it serving on slower classes (docs/upstream-fidelity.md). The flash modules
import utils/flash_attn.py (triton and flash_attn_2_cuda, and a visible GPU), utils/paged_attention.py (vllm._C) and the
layers (vllm._custom_C on ROCm; rotary_emb and dropout_layer_norm on CUDA). This module asks the registry, and
when a promised path is off, imports those modules again to name what is missing.

Import it in a fresh process (`python3 -m smoke.tgi_attention` or `check_isolated`): the registry switches off
autograd and sets TF32 flags for the whole process.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

RUNTIME_KIND = "tgi"  # the runtime kind (matrix runtimes.<r>.kind) whose attention promises this module probes
REGISTRY = "text_generation_server.models"
PAGED = "text_generation_server.utils.paged_attention"
# The TGI modules the FLASH_ATTENTION flag depends on, most specific first: the first that fails names the cause.
FLASH_PROBES = (
    "text_generation_server.utils.flash_attn",
    PAGED,
    "text_generation_server.layers.linear",
    "text_generation_server.layers.rotary",
    "text_generation_server.layers.layernorm",
    "text_generation_server.models.flash_llama",
    "text_generation_server.models.flash_mixtral",
    "text_generation_server.models.flash_dbrx",
)

Importer = Callable[[str], ModuleType]


@dataclass
class AttentionState:
    """What TGI's registry decided in this process, and why a path is off (None when on)."""

    flash: bool
    paged: bool
    flash_error: str | None = None
    paged_error: str | None = None


def describe(exc: BaseException) -> str:
    """One line naming the missing module when the exception chain has one, and the first message."""
    missing = None
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ImportError) and seen.name:
            missing = seen.name
            break
        seen = seen.__cause__ or seen.__context__
    message = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if missing:
        return f"module {missing!r} cannot be imported ({type(exc).__name__}: {message})"
    return f"{type(exc).__name__}: {message}"


def _first_failure(modules: tuple[str, ...], importer: Importer) -> str | None:
    for name in modules:
        try:
            importer(name)
        except Exception as exc:  # TGI turns every import problem into a disabled path; so do we, by name
            return f"{name}: {describe(exc)}"
    return None


def inspect(importer: Importer = importlib.import_module) -> AttentionState:
    """Import TGI's model registry and report its flash and paged attention decisions."""
    try:
        registry = importer(REGISTRY)
    except Exception as exc:
        why = f"{REGISTRY}: {describe(exc)}"
        return AttentionState(False, False, why, why)
    flash = bool(getattr(registry, "FLASH_ATTENTION", False))
    flash_error = None
    if not flash:
        flash_error = _first_failure(FLASH_PROBES, importer) or f"{REGISTRY}.FLASH_ATTENTION is False"
    paged_error = _first_failure((PAGED,), importer)
    return AttentionState(flash, paged_error is None, flash_error, paged_error)


def promises_for(promises: dict[str, dict[str, bool]], arch: str | None) -> dict[str, bool]:
    """The promises made for the device's arch: its exact ID, else the nearest image arch whose code runs on it
    (gfx942 for gfx942:sramecc+:xnack-; sm_80 for sm_86, its cubins run there), by the preflight's one rule
    (imagecontract.models.manifest.covering)."""
    if not arch:
        return {}
    if arch in promises:
        return promises[arch]
    from imagecontract.models.manifest import covering

    found = covering(promises, arch)
    return promises[found[0]] if found else {}


def failures(promises: dict[str, dict[str, bool]], arch: str | None, state: AttentionState) -> list[str]:
    """The broken promises for this arch: each names the path, the arch and the missing module."""
    promised = promises_for(promises, arch)
    out = []
    for path, enabled, why in (("flash", state.flash, state.flash_error), ("paged", state.paged, state.paged_error)):
        if promised.get(path) and not enabled:
            out.append(f"{path} attention promised for {arch} but TGI disabled it: {why}")
    return out


def check(promises: dict[str, dict[str, bool]], arch: str | None) -> list[str]:
    """In this process (a fresh one: see the module docstring): broken promises, empty when all are kept."""
    return failures(promises, arch, inspect())


def check_isolated(
    promises: dict[str, dict[str, bool]], arch: str | None, timeout_s: float = 600
) -> tuple[list[str], AttentionState | None]:
    """check() in a child process; (failures, state). A child that gives no answer is itself a failure."""
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "smoke.tgi_attention", "--promises", json.dumps(promises), "--arch", arch or ""]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return [f"importing {REGISTRY} did not finish within {timeout_s:.0f} s"], None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            return list(data["failures"]), AttentionState(**data["state"])
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return [f"the TGI attention probe exited {proc.returncode} without an answer: {last}"], None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m smoke.tgi_attention", description=__doc__.splitlines()[0])
    parser.add_argument("--promises", default="{}", help='JSON: {"ARCH": {"flash": bool, "paged": bool}}')
    parser.add_argument("--arch", default="", help="the device arch the promises are looked up by")
    args = parser.parse_args(argv)
    state = inspect()
    broken = failures(json.loads(args.promises), args.arch or None, state)
    print(json.dumps({"state": asdict(state), "failures": broken}), flush=True)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
