"""`imagebuild doctor` on simulated hosts (the preflight's fake sysfs and /dev trees) and on this machine."""

from __future__ import annotations

import json
from pathlib import Path

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
    """This build machine has no GPU driver: doctor says so and exits 1 (not 2: nothing was misused)."""
    result = CliRunner().invoke(main, ["doctor", "--json"])
    doc = json.loads(result.output)
    if doc["kind"] == "none":
        assert result.exit_code == 1 and doc["problems"] == ["no GPU driver"] and doc["docker_run"] == []
    else:
        assert result.exit_code == (0 if doc["ok"] else 1)
