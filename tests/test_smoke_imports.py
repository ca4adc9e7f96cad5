"""The smoke suite's `imports` check (issue 31 item 4): the runtime's package and every compiled extension of its
distribution load, found from the manifest's entrypoint. Real distributions: torch's `torchrun` from the test venv,
and a distribution made here whose extensions are a corrupt file and a real shared object that needs the NVIDIA
driver's libcuda.so.1 (built with the C compiler setup.sh installs, against a stub library deleted afterwards)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from smoke.checks import imports


def _ctx(entrypoint: str | None, on_gpu: bool = False) -> Any:
    """The three facts the check reads of a Context (a Context would need a device probe)."""
    runtime = SimpleNamespace(entrypoint=entrypoint) if entrypoint else None
    return SimpleNamespace(manifest=SimpleNamespace(runtime=runtime, present=True), on_gpu=on_gpu)


def _fake_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extensions: dict[str, bytes]) -> None:
    """fakert 1.0 on sys.path and PYTHONPATH: a console script `fakert` and the given extension files."""
    site = tmp_path / "site"
    (site / "fakert").mkdir(parents=True)
    (site / "fakert" / "__init__.py").write_text("")
    (site / "fakert" / "cli.py").write_text("def main():\n    pass\n")
    files = ["fakert/__init__.py", "fakert/cli.py"]
    for name, data in extensions.items():
        (site / "fakert" / name).write_bytes(data)
        files.append(f"fakert/{name}")
    info = site / "fakert-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakert\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nfakert = fakert.cli:main\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, "fakert-1.0.dist-info/RECORD"]))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))


def _needs_libcuda(tmp_path: Path) -> bytes:
    """A real Python extension module (PyInit_ defined) whose DT_NEEDED names libcuda.so.1."""
    work = tmp_path / "cc"
    work.mkdir()
    (work / "stub.c").write_text("int cuInit(unsigned int f) { return (int)f; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", work / "libcuda.so.1", work / "stub.c"], check=True
    )
    (work / "libcuda.so").symlink_to("libcuda.so.1")
    (work / "ext.c").write_text("int cuInit(unsigned int);\nvoid *PyInit__drv(void) { cuInit(0); return 0; }\n")
    out = work / "_drv.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", out, work / "ext.c", f"-L{work}", "-lcuda"], check=True)
    return out.read_bytes()  # the stub stays in tmp: nothing on the loader's path finds it


def test_torchs_console_script_imports_with_every_extension_of_torch() -> None:
    res = imports.run(_ctx("torchrun"))
    assert res.status == "passed", res.reason
    assert res.numbers["distribution"] == "torch" and res.numbers["module"] == "torch.distributed.run"
    assert res.numbers["extensions"] >= 1 and res.numbers["loaded"] == res.numbers["extensions"] + 1
    assert "torch._C" in imports._extension_modules(imports._console_script("torchrun").dist)  # type: ignore[union-attr]


def test_a_corrupt_extension_fails_and_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = next(s for s in imports._suffixes() if s.startswith(".cpython-"))
    _fake_runtime(tmp_path, monkeypatch, {f"_bad{tag}": b"\x7fELF not really", "_fine.py": b""})
    res = imports.run(_ctx("fakert"))
    assert res.status == "failed" and res.reason
    assert res.reason.startswith("fakert._bad: ImportError") and res.numbers["extensions"] == 1


def test_a_missing_gpu_driver_library_is_a_warning_on_a_cpu_and_a_failure_on_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_runtime(tmp_path, monkeypatch, {"_drv.abi3.so": _needs_libcuda(tmp_path)})
    on_cpu = imports.run(_ctx("fakert"))
    assert on_cpu.status == "passed", on_cpu.reason
    assert on_cpu.numbers["needs_gpu_driver"] == {"fakert._drv": "libcuda.so"}
    assert "need the GPU driver" in on_cpu.warnings[0]
    on_gpu = imports.run(_ctx("fakert", on_gpu=True))
    assert on_gpu.status == "failed" and "libcuda.so.1: cannot open shared object file" in (on_gpu.reason or "")


def test_no_runtime_or_a_binary_entrypoint_is_skipped_with_its_reason() -> None:
    assert imports.run(_ctx(None)).reason == "the image has no serving runtime"
    res = imports.run(_ctx("text-generation-launcher"))  # TGI's launcher is a Rust binary
    assert res.status == "skipped" and "not a Python console script" in (res.reason or "")


def test_a_crashing_import_fails_the_check_not_the_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_runtime(tmp_path, monkeypatch, {})
    (tmp_path / "site" / "fakert" / "cli.py").write_text("import os\nos.abort()\n")
    res = imports.run(_ctx("fakert"))
    assert res.status == "failed" and "without a result" in (res.reason or "")
    assert sys.executable  # the suite's own interpreter is still here


def test_the_cause_under_a_package_that_rewrites_the_error_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm.vllm_flash_attn's __init__ turns its extension's libcuda.so.1 error into its own ImportError: the
    extension is then loaded from its file alone, and the driver rule applies to what that says."""
    _fake_runtime(tmp_path, monkeypatch, {})
    attn = tmp_path / "site" / "fakert" / "attn"
    attn.mkdir()
    (attn / "__init__.py").write_text(
        "try:\n    from fakert.attn import _drv\n"
        "except ImportError:\n    raise ImportError('requires the CUDA extensions')\n"
    )
    (attn / "_drv.abi3.so").write_bytes(_needs_libcuda(tmp_path))
    record = tmp_path / "site" / "fakert-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "fakert/attn/__init__.py,,\nfakert/attn/_drv.abi3.so,,\n")
    res = imports.run(_ctx("fakert"))
    assert res.status == "passed", res.reason
    assert res.numbers["needs_gpu_driver"] == {"fakert.attn._drv": "libcuda.so"}
