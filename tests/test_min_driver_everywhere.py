"""platform.min_driver checked wherever the driver is (issue 30 item 4): the in-image preflight, `imagebuild doctor`
and the smoke suite's environment check, by one implementation (imagecontract.driver.min_driver over the version
that imagecontract.driver.driver_version reads where the platform kind says). Every host here is simulated: fake
sysfs/procfs and /dev trees under tmp_path, and a stand-in for nvidia-smi's answer (there is no GPU on this machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.prove import doctor
from imagecontract import kinds, preflight
from imagecontract.driver import Identity, driver_version
from smoke.checks.environment import check_driver
from smoke.result import CheckResult

ROOT_USER = Identity(0, (0,))
NVIDIA = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {}  Release Build  (dvs-builder@U16)\n"
OLDER = "driver 470.57.02 is older than 525, the lowest this image runs on (manifest platform.min_driver)"


def simulated_nvidia_host(tmp: Path, version: str | None) -> Path:
    """One H200 by the driver's own files: /proc/driver/nvidia (version, the GPU's information) and its nodes."""
    (tmp / "dev").mkdir(parents=True)
    for name in ("nvidiactl", "nvidia0"):
        (tmp / "dev" / name).write_bytes(b"")
        (tmp / "dev" / name).chmod(0o666)
    info = tmp / "proc/driver/nvidia/gpus/0000:01:00.0/information"
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA H200\n")
    if version is not None:
        (tmp / "proc/driver/nvidia/version").write_text(NVIDIA.format(version))
    return tmp


def simulated_h200_query() -> str:
    return "0, NVIDIA H200, 9.0\n"


def image(min_driver: str | None) -> dict[str, object]:
    platform: dict[str, object] = {"kind": "cuda", **({"min_driver": min_driver} if min_driver else {})}
    return {"target": "cuda12.1-torch2.3", "platform": platform, "gpu_arches": ["sm_90"], "experimental_arches": []}


def preflight_says(root: Path, min_driver: str | None) -> list[tuple[str, str]]:
    found = preflight.check(image(min_driver), {}, root, who=ROOT_USER, query=simulated_h200_query)
    return [(f.level, f.message) for f in found]


def doctor_says(root: Path, min_driver: str | None) -> doctor.HostFacts:
    facts = doctor.gather(root, ROOT_USER, simulated_h200_query)
    facts.image, facts.image_arches, facts.min_driver = "img", ["sm_90"], min_driver
    return facts


def smoke_says(root: Path, min_driver: str | None) -> CheckResult:
    res = CheckResult("environment")
    check_driver(min_driver, "nvidia", res, str(root))
    return res.finish()


def test_simulated_nvidia_host_the_version_is_read_where_the_cuda_kind_says(tmp_path: Path) -> None:
    root = simulated_nvidia_host(tmp_path, "550.54.14")
    cuda = kinds.platform("cuda")
    assert driver_version(root, cuda.DRIVER_FILE, cuda.DRIVER_VERSION) == "550.54.14"
    assert doctor.gather(root, ROOT_USER).version == "550.54.14"
    assert driver_version(root, kinds.NO_GPU.DRIVER_FILE, kinds.NO_GPU.DRIVER_VERSION) is None


def test_simulated_older_driver_is_refused_by_preflight_doctor_and_smoke_alike(tmp_path: Path) -> None:
    root = simulated_nvidia_host(tmp_path, "470.57.02")
    assert preflight_says(root, "525") == [("refuse", OLDER)]
    facts = doctor_says(root, "525")
    assert facts.problems() == [OLDER] and f"problem: {OLDER}" in doctor.describe(facts)
    smoke = smoke_says(root, "525")
    assert smoke.status == "failed" and smoke.reason == OLDER


def test_simulated_new_enough_driver_passes_everywhere(tmp_path: Path) -> None:
    root = simulated_nvidia_host(tmp_path, "550.54.14")
    assert preflight_says(root, "525") == []
    facts = doctor_says(root, "525")
    assert facts.problems() == []
    assert "  driver 550.54.14 is not older than 525 (the image's min_driver)" in doctor.describe(facts)
    assert doctor.as_dict(facts)["driver_version"] == "550.54.14"
    assert smoke_says(root, "525").status == "passed"
    assert preflight_says(root, None) == [] and doctor_says(root, None).driver_check() is None


def test_simulated_unreadable_version_is_a_clear_skip_line_not_a_refusal(tmp_path: Path) -> None:
    root = simulated_nvidia_host(tmp_path, None)  # the GPU is listed, the version file is not there
    skip = "the NVIDIA driver's version could not be read: min_driver 525 not checked"
    assert preflight_says(root, "525") == [("warn", skip)]
    facts = doctor_says(root, "525")
    assert facts.problems() == [] and f"  skipped: {skip}" in doctor.describe(facts)
    smoke = smoke_says(root, "525")
    assert smoke.status == "passed" and "not checked" in smoke.warnings[0]


def test_simulated_host_without_a_gpu_driver_says_min_driver_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert doctor.main(["--root", str(tmp_path), "--min-driver", "525"]) == 0  # the stdlib entry point takes it too
    assert "  skipped: no GPU driver on this host: min_driver 525 not checked" in capsys.readouterr().out.splitlines()


def test_simulated_amdgpu_dkms_version(tmp_path: Path) -> None:
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.7.0\n")
    rocm = kinds.platform("rocm")
    assert driver_version(tmp_path, rocm.DRIVER_FILE, rocm.DRIVER_VERSION) == "6.7.0"
    (tmp_path / "sys/module/amdgpu/version").write_text("٦.٧\n")  # other scripts' digits are no version
    assert driver_version(tmp_path, rocm.DRIVER_FILE, rocm.DRIVER_VERSION) is None
