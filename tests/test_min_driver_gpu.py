"""The smoke environment check's driver reading on a real NVIDIA machine (issue 24: GPU truth): skipped on a
CPU machine with its reason, run on the GPU machine (its command and output: bench/results/min_driver_h200.log).
Imports only what the smoke suite imports inside an image, so the GPU machine's own Python runs it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from smoke.checks.environment import check_driver, driver_version
from smoke.result import CheckResult

NVIDIA_PROC = Path("/proc/driver/nvidia/version")


@pytest.mark.skipif(not NVIDIA_PROC.exists(), reason="no NVIDIA kernel module loaded here: runs on the GPU machine")
def test_the_loaded_nvidia_driver_is_read_as_nvidia_smi_reports_it() -> None:
    """On a real NVIDIA machine: the version read from the kernel module is the one nvidia-smi reports, and the
    check passes a minimum below it and fails one above it."""
    import shutil
    import subprocess

    live = driver_version("nvidia")
    assert live is not None and re.fullmatch(r"\d+(\.\d+)+", live), NVIDIA_PROC.read_text()[:300]
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        assert live in smi.stdout.split(), (live, smi.stdout)
    below, above = CheckResult("environment"), CheckResult("environment")
    check_driver("470", "nvidia", below)
    check_driver(str(int(live.split(".")[0]) + 1), "nvidia", above)
    assert below.status == "passed" and not below.warnings and below.numbers["driver_version"] == live
    assert above.status == "failed" and live in " ".join(above.failures)
