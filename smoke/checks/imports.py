"""The serving runtime's Python package imports, and every compiled extension it ships loads (issue 31 item 4).

An image can carry a runtime whose extensions were built for another torch, another glibc or another CPU: it starts
on nobody's machine, and a serve check that is skipped (a GPU image smoked on a CPU) would never see it. The runtime
is found from the manifest's entrypoint (the console script `vllm`, `sglang`, `transformers` names its module and
distribution), so no runtime kind is named here. Its distribution's files with a tagged extension suffix
(`.cpython-*.so`, `.abi3.so`) are the extensions; each is imported in one child interpreter (a crash there fails
this check, not the suite). Without a GPU, an extension whose only error is a missing library of a GPU driver (the
kinds' `DRIVER_LIBRARIES`, e.g. libcuda.so.1, which the NVIDIA container toolkit mounts from the host) is recorded
as needing the driver, not failed; on a GPU every extension must load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

from imagecontract import kinds
from imagecontract.smoke_run import TIME_SCALE_ENV, time_scale
from smoke.context import Context
from smoke.result import CheckResult

IMPORT_TIMEOUT_S = 300
MAX_EXTENSIONS = 512  # vLLM 0.33.0 ships 14; a distribution listing more is refused, not imported one by one
TAGGED_SUFFIXES = (".abi3.so",)  # plus the interpreter's own .cpython-<tag>.so (below)
ERROR_CHARS = 300

# The child: imports the module, then each extension; prints one JSON line {name: null | "Type: message"}. An
# extension that fails through its package (vllm.vllm_flash_attn's __init__ replaces the loader's error with its
# own) is loaded once more from its file alone, whose error is the cause (e.g. libcuda.so.1 missing).
CHILD = r"""
import importlib, importlib.util, json, sys
out = {}
for name, path in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
        out[name] = None
        continue
    except BaseException as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
    if path:
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            importlib.util.module_from_spec(spec)
        except BaseException as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def _console_script(name: str) -> metadata.EntryPoint | None:
    return next(iter(metadata.entry_points(group="console_scripts", name=name)), None)


def _extension_modules(dist: metadata.Distribution) -> list[str]:
    """Dotted names of the distribution's compiled Python extensions (tagged suffixes only: a plain .so is a
    shared library as often as a module)."""
    return sorted(_extension_files(dist))


def _extension_files(dist: metadata.Distribution) -> dict[str, str]:
    """Each compiled extension's dotted name and the file it loads from."""
    tags = (*TAGGED_SUFFIXES, next((s for s in _suffixes() if s.startswith(".cpython-")), ".cpython-"))
    found = {}
    for path in dist.files or ():
        text = str(path)
        suffix = next((t for t in tags if text.endswith(t)), None)
        if suffix is None or text.startswith(".."):  # ../../bin: files the wheel put outside site-packages
            continue
        dotted = text[: -len(suffix)].replace("/", ".")
        if all(part.isidentifier() for part in dotted.split(".")):
            found[dotted] = str(dist.locate_file(path))
    return found


def _suffixes() -> list[str]:
    from importlib.machinery import EXTENSION_SUFFIXES

    return list(EXTENSION_SUFFIXES)


def _driver_library(error: str) -> str | None:
    """The GPU driver library an import error names as missing, if that is all it says."""
    if "cannot open shared object file" not in error:
        return None
    return next((lib for kind in kinds.GPU_KINDS for lib in kind.DRIVER_LIBRARIES if lib in error), None)


def run(ctx: Context) -> CheckResult:
    res = CheckResult("imports")
    runtime = ctx.manifest.runtime
    if not runtime:
        return res.skip("no manifest" if not ctx.manifest.present else "the image has no serving runtime")
    script = _console_script(runtime.entrypoint)
    if script is None or script.dist is None:
        return res.skip(f"the runtime's entrypoint {runtime.entrypoint!r} is not a Python console script")
    dist = script.dist
    files = _extension_files(dist)
    extensions = sorted(files)
    if len(extensions) > MAX_EXTENSIONS:
        res.fail(f"{dist.name} lists {len(extensions)} extension modules (more than {MAX_EXTENSIONS})")
        return res.finish()
    module = script.value.split(":", 1)[0].strip()
    res.numbers.update(distribution=dist.name, version=dist.version, module=module, extensions=len(extensions))
    deadline = IMPORT_TIMEOUT_S * time_scale(os.environ.get(TIME_SCALE_ENV))
    try:
        child = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps([[module, None], *([n, files[n]] for n in extensions)])],
            capture_output=True,
            text=True,
            timeout=deadline,
            check=False,
        )
    except subprocess.TimeoutExpired:
        res.fail(f"importing {module} and {len(extensions)} extensions took over {deadline} s")
        return res.finish()
    lines = child.stdout.strip().splitlines()
    try:
        outcome = json.loads(lines[-1]) if lines else None
    except ValueError:
        outcome = None
    if not isinstance(outcome, dict):
        tail = " | ".join(child.stderr.strip().splitlines()[-2:])[:ERROR_CHARS]
        res.fail(f"the import child exited {child.returncode} without a result: {tail}")
        return res.finish()
    needs_driver: dict[str, str] = {}
    for name in [module, *extensions]:
        error = outcome.get(name, "not reported")
        if error is None:
            continue
        error = " ".join(str(error).split())[:ERROR_CHARS]
        library = _driver_library(error)
        if library and not ctx.on_gpu:
            needs_driver[name] = library
        else:
            res.fail(f"{name}: {error}")
    res.numbers["loaded"] = len(extensions) + 1 - len(needs_driver) - len(res.failures)
    if needs_driver:
        res.numbers["needs_gpu_driver"] = needs_driver
        res.warnings.append(
            f"{len(needs_driver)} extension(s) need the GPU driver's libraries to load, absent on this host: "
            + ", ".join(sorted(needs_driver))[:ERROR_CHARS]
        )
    return res.finish()
