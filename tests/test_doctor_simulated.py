"""`imagebuild doctor` on simulated hosts (the preflight's fake sysfs and /dev trees) and on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import main
from imagebuild.prove import doctor
from imagecontract.driver import Identity
from tests.test_preflight_simulated import rocm_host


def test_simulated_mi250_host_flags_use_numeric_groups(tmp_path: Path) -> None:
    root = rocm_host(tmp_path, [90010, 90010], render_gid=109)
    facts = doctor.gather(root, Identity(1000, (44,)))
    assert doctor.run_flags(facts) == [
        "--device", "/dev/kfd", "--device", "/dev/dri/renderD128", "--device", "/dev/dri/renderD136",
        "--group-add", "44", "--group-add", "109", "--ipc=host", "--security-opt", "seccomp=unconfined",
    ]  # fmt: skip
    assert facts.problems() == [
        "cannot open /dev/dri/renderD128: permission denied (mode bits)",
        "cannot open /dev/dri/renderD136: permission denied (mode bits)",
    ]
    assert '      - "109"' in doctor.compose_snippet(facts)
    k8s = doctor.kubernetes_snippet(facts)
    assert "supplementalGroups: [44, 109]" in k8s and "amd.com/gpu: 2" in k8s


def test_simulated_image_fit(tmp_path: Path) -> None:
    facts = doctor.gather(rocm_host(tmp_path, [90402, 110000]), Identity(0, (0,)))
    facts.image, facts.image_arches = "img", ["gfx942"]
    assert facts.fit() == {0: True, 1: False}
    assert facts.problems() == ["GPU 1 (gfx1100) is not covered by img (gfx942)"]
    doc = doctor.as_dict(facts)
    assert doc["ok"] is False and doc["gpus"][1]["arch"] == "gfx1100"


def test_simulated_stdlib_entry_exit_codes(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    root = rocm_host(tmp_path, [90402])
    assert doctor.main(["--root", str(root), "--arch", "gfx942", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fit"] == {"0": True}
    assert doctor.main(["--root", str(root), "--arch", "gfx90a"]) == 1
    assert "problem: GPU 0 (gfx942) is not covered by --arch (gfx90a)" in capsys.readouterr().out


def test_cli_doctor_on_this_machine() -> None:
    """This build machine has no GPU driver: a fact, not a failure (issue 34: it exited 1 on the quick start's
    machine); doctor says so and exits 0."""
    result = CliRunner().invoke(main, ["doctor", "--json"])
    doc = json.loads(result.output)
    if doc["kind"] == "none":
        assert result.exit_code == 0 and doc["problems"] == [] and doc["docker_run"] == [], result.output
        assert doc["ok"] is True and "no GPU driver" in doc["verdict"]
    else:
        assert result.exit_code == (0 if doc["ok"] else 1)


def test_cli_doctor_require_a_feature_the_engine_has_exits_0_and_one_it_lacks_exits_2(cli_subprocess) -> None:  # noqa: ANN001
    """`--require X` exits 2 only for a missing feature (issue 34: `--require oci-media-types` exited 1 on a
    CPU machine whose engine has it). The engines scripts/setup.sh starts, through the real CLI: the default
    one (Docker 26.1, containerd store: every feature) and, when there, Docker 20.10 (overlay2: no OCI media
    types)."""
    import os
    import shutil

    if shutil.which("docker") is None:
        pytest.skip("no docker client; run scripts/setup.sh")
    old = os.environ.get("IMAGEBUILD_DOCKER20_SOCK", "/var/run/imagebuild-docker20.sock")
    engines = {"default": {}, "docker20": {"DOCKER_HOST": f"unix://{old}"}}
    checked = 0
    for name, env in engines.items():
        facts = cli_subprocess("doctor", "--json", env=env)
        if "error" in json.loads(facts.stdout)["engine"]:
            continue  # no such engine here
        features = {f["name"]: f["available"] for f in json.loads(facts.stdout)["engine"]["features"]}
        for feature, available in features.items():
            run = cli_subprocess("doctor", "--require", feature, env=env)
            errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
            if available:  # this CPU machine's GPU facts do not fail it
                assert run.exit_code == 0 and errors == [], (name, feature, run.stdout + run.stderr)
            else:
                assert run.exit_code == 2 and len(errors) == 1, (name, feature, run.stdout + run.stderr)
            checked += 1
    if not checked:
        pytest.skip("no engine answers; run scripts/setup.sh")


@pytest.mark.parametrize(
    ("kind", "arches", "code", "words"),
    [
        ("none", None, 0, "ok: no GPU driver on this host"),
        ("none", [], 0, "ok: img declares no GPU arches"),
        ("none", ["gfx942"], 1, "problem: no GPU driver: img holds code for GPUs only (gfx942)"),
        ("rocm", [], 0, "ok: img declares no GPU arches"),
        ("rocm", ["gfx942"], 0, "ok: this host can run img"),
        ("rocm", ["gfx90a"], 1, "problem: GPU 0 (gfx942) is not covered by img (gfx90a)"),
    ],
)
def test_a_cpu_host_or_a_cpu_image_is_a_fact_not_a_failure(
    tmp_path: Path, kind: str, arches: list[str] | None, code: int, words: str
) -> None:
    root = rocm_host(tmp_path, [90402]) if kind == "rocm" else tmp_path
    facts = doctor.gather(root, Identity(0, (0,)))
    if arches is not None:
        facts.image, facts.image_arches = "img", arches
    assert facts.kind == kind
    assert (1 if facts.problems() else 0) == code, facts.problems()
    assert words in doctor.describe(facts)[-1]


def test_a_kfd_properties_file_over_the_limit_is_a_gpu_that_cannot_be_checked_not_no_gpu(tmp_path: Path) -> None:
    """Issue 34: a properties file over 64 KiB was read as nothing, so its GPU vanished and the preflight
    passed; now the GPU is kept with its arch unread, the preflight refuses and doctor names it."""
    from imagecontract import preflight
    from imagecontract.driver import rocm_gpus

    root = rocm_host(tmp_path, [90402, 90402])
    props = root / "sys/class/kfd/kfd/topology/nodes/2/properties"
    props.write_text(props.read_text() + "padding " + "x" * (70 << 10) + "\n")
    gpus = rocm_gpus(root)
    assert [g.arch for g in gpus] == ["gfx942", None] and "larger than" in gpus[1].name, gpus
    manifest = {"target": "t", "platform": {"kind": "rocm"}, "gpu_arches": ["gfx942"], "experimental_arches": []}
    found = preflight.check(manifest, {}, root, who=Identity(0, (0,)))
    assert [f.level for f in found] == ["refuse"] and "arch cannot be read" in found[0].message, found
    facts = doctor.gather(root, Identity(0, (0,)))
    assert any("arch cannot be read" in p for p in facts.problems()), facts.problems()
    props.unlink()  # absent: the same, never a silent CPU node
    assert [g.arch for g in rocm_gpus(root)] == ["gfx942", None]


def test_driver_files_are_read_bounded_and_printed_without_control_characters(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """An NVIDIA /proc tree whose version line and GPU model hold ESC, OSC, BEL and NUL, and a 1 MiB line."""
    info = tmp_path / "proc/driver/nvidia/gpus/0000:01:00.0/information"
    info.parent.mkdir(parents=True)
    info.write_bytes(b"Model: \x1b]0;owned\x07H200\x00\x1b[2J\n")
    version = tmp_path / "proc/driver/nvidia/version"
    version.write_bytes(b"NVRM version: \x1b[31m580.1\x9b1m\n")
    assert doctor.main(["--root", str(tmp_path)]) == 1  # its /dev nodes are not in this tree
    out = capsys.readouterr().out
    assert "H200" in out and "580.1" in out
    assert not any(c in out for c in "\x1b\x07\x00\x9b"), repr(out)
    version.write_bytes(b"9" * (1 << 20))  # past the 64 KiB a procfs file may have: not read, not printed
    assert doctor.driver_version(tmp_path, "cuda") is None
    version.write_bytes(b"x" * 5000 + b"\n")
    assert len(doctor.driver_version(tmp_path, "cuda") or "") <= 200
