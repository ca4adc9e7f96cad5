"""`imagebuild smoke` and `publish` against a real engine and registry: the local-cpu image smoked in its
container, published and pulled back by digest; a failing smoke that cannot be published; a registry that
dies mid-push; promotion of a staged digest between two repositories."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import CLI, REPO, docker, imagebuild, registry_digest, unique

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_smoke_runs_in_the_container_and_records_the_image_id(smoked_local_cpu: tuple[Any, Path]) -> None:
    built, report_path = smoked_local_cpu
    report = json.loads(report_path.read_text())
    assert report["passed"] is True and report["image_id"] == built.image_id
    assert report["manifest"]["present"] and report["manifest"]["target"] == "local-cpu"
    status = {check["name"]: check["status"] for check in report["checks"]}
    assert {status[name] for name in ("silu", "linear", "attention")} == {"passed"}
    assert report["versions"]["torch"].startswith("2.13.0")
    junit = report_path.with_name("junit.xml").read_text()
    assert "<testsuite" in junit and "silu" in junit


def test_publish_then_pull_back_by_digest(smoked_local_cpu: tuple[Any, Path], registry: str, tmp_path: Path) -> None:
    built, smoke_report = smoked_local_cpu
    repo = unique("e2e-publish")
    out = tmp_path / "publish.json"
    amd64 = ("local-cpu", "--platform", "linux/amd64")  # the amd64 image alone (the index: test_publish_index_e2e)
    dest = ("--registry", f"{registry}/{repo}", "--out", str(out))
    run = imagebuild("publish", *amd64, *dest, "--report", str(smoke_report))
    assert run.returncode == 0, run.output[-3000:]
    report = json.loads(out.read_text())
    digest = report["digest"]
    assert report["ok"] and report["image_id"] == built.image_id and report["smoke_report"] == str(smoke_report)
    tags = sorted(ref.rsplit(":", 1)[1] for ref in report["refs"])
    assert tags == sorted(t.split(":", 1)[1] for t in built.tags)
    for tag in tags:
        assert registry_digest(registry, repo, tag) == digest
    pulled = f"{registry}/{repo}@{digest}"
    docker("pull", pulled)
    inspect = json.loads(docker("image", "inspect", pulled).stdout)[0]
    # The ID of what was pulled: the config digest on a graph-driver engine (the built image's ID), the manifest
    # digest on the containerd store (where the built image's ID is its local index's); its content is the built
    # image's either way: the same layers and the same config.
    assert inspect["Id"] in (built.image_id, digest)
    local = json.loads(docker("image", "inspect", built.image_id).stdout)[0]
    assert inspect["RootFS"]["Layers"] == local["RootFS"]["Layers"] and inspect["Config"] == local["Config"]
    assert inspect["Config"]["Labels"]["io.imagebuild.target"] == "local-cpu"
    manifest = docker(
        "run", "--rm", "--network", "host", "--entrypoint", "cat", pulled, "/opt/imagebuild/manifest.json"
    ).stdout
    assert json.loads(manifest) == json.loads((REPO / "dockerfiles/local-cpu/manifest.json").read_text())


def test_failing_smoke_exits_4_and_cannot_be_published(failing_image: str, registry: str, tmp_path: Path) -> None:
    smoke_report = tmp_path / "smoke" / "report.json"
    run = imagebuild("smoke", failing_image, "--gpu", "none", "--report", str(smoke_report))
    assert run.returncode == 4, run.output[-3000:]
    assert run.stderr.strip().splitlines()[-1].startswith("error: smoke failed")
    report = json.loads(smoke_report.read_text())
    image_id = json.loads(docker("image", "inspect", failing_image).stdout)[0]["Id"]
    assert report["passed"] is False and report["image_id"] == image_id

    repo = unique("e2e-refused")
    out = tmp_path / "publish.json"
    for extra in (("--report", str(smoke_report)), ()):  # the given report, and the default search
        refused = imagebuild("publish", failing_image, "--registry", f"{registry}/{repo}", "--out", str(out), *extra)
        assert refused.returncode == 5, refused.output[-3000:]
        assert "no passing smoke report" in refused.stderr.strip().splitlines()[-1]
        assert json.loads(out.read_text())["ok"] is False
    assert registry_digest(registry, repo, "smoke-fails") is None

    forced = imagebuild(
        "publish",
        failing_image,
        "--registry",
        f"{registry}/{repo}",
        "--out",
        str(out),
        "--report",
        str(smoke_report),
        "--allow-unsmoked",
    )
    assert forced.returncode == 0, forced.output[-3000:]
    assert "warning:" in forced.stderr
    record = json.loads(out.read_text())
    assert record["allow_unsmoked"] is True and image_id in record["warning"]
    assert registry_digest(registry, repo, "smoke-fails") == record["digest"]


def test_registry_stopped_during_publish_exits_5_and_leaves_no_public_tag(
    smoked_local_cpu: tuple[Any, Path], scratch_registry: Any, tmp_path: Path
) -> None:
    built, smoke_report = smoked_local_cpu
    out = tmp_path / "publish.json"
    proc = subprocess.Popen(
        [
            *CLI,
            "publish",
            "local-cpu",
            "--platform",
            "linux/amd64",
            "--registry",
            f"{scratch_registry.addr}/victim",
            "--report",
            str(smoke_report),
            "--out",
            str(out),
        ],
        cwd=REPO,
        env={**os.environ, "IMAGEBUILD_PUBLISH_ATTEMPTS": "2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not scratch_registry.uploads_started() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert scratch_registry.uploads_started(), "the push never started uploading"
    scratch_registry.stop()
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 5, stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: push to") and scratch_registry.addr in last and "Traceback" not in stderr
    assert json.loads(out.read_text())["ok"] is False
    scratch_registry.start()
    for tag in (t.split(":", 1)[1] for t in built.tags):
        assert registry_digest(scratch_registry.addr, "victim", tag) is None


def test_promote_copies_a_staged_digest_to_another_repository(
    smoked_local_cpu: tuple[Any, Path], registry: str, tmp_path: Path
) -> None:
    built, smoke_report = smoked_local_cpu
    staging, public = unique("e2e-staging"), unique("e2e-public")
    staged = tmp_path / "staged.json"
    run = imagebuild(
        "publish",
        "local-cpu",
        "--platform",
        "linux/amd64",
        "--registry",
        f"{registry}/{staging}",
        "--tag",
        "candidate",
        "--report",
        str(smoke_report),
        "--out",
        str(staged),
    )
    assert run.returncode == 0, run.output[-3000:]
    digest = json.loads(staged.read_text())["digest"]
    source = f"{registry}/{staging}@{digest}"

    other = tmp_path / "other-report.json"
    other.write_text(json.dumps({"image_id": "sha256:" + "0" * 64, "passed": True}))
    refused = imagebuild("publish", "--promote", source, "--registry", f"{registry}/{public}", "--report", str(other))
    assert refused.returncode == 5 and registry_digest(registry, public, "local-cpu") is None

    out = tmp_path / "promoted.json"
    run = imagebuild(
        "publish",
        "--promote",
        source,
        "--registry",
        f"{registry}/{public}",
        "--report",
        str(smoke_report),
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.output[-3000:]
    report = json.loads(out.read_text())
    assert report["image_id"] == built.image_id and report["digest"] == digest
    assert report["refs"] == [f"{registry}/{public}:local-cpu"]
    assert registry_digest(registry, public, "local-cpu") == digest


@pytest.mark.skipif(Path("/dev/kfd").exists(), reason="this host has a ROCm device")
def test_rocm_smoke_without_a_rocm_device_is_a_usage_error(local_cpu: Any) -> None:
    run = imagebuild("smoke", "local-cpu", "--gpu", "rocm")
    assert run.returncode == 2 and "/dev/kfd" in run.stderr.strip().splitlines()[-1]
