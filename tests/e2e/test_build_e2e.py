"""`imagebuild build` against a real engine: the local-cpu image, its labels and manifest, the cache,
a broken step, no engine, and a planted secret that must not leak."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import DOCKER, REPO, docker, imagebuild

pytestmark = pytest.mark.docker
# Scratch repositories tag under their own name, so they never move the session's imagebuild:local-cpu.
SCRATCH_ENV = {"IMAGEBUILD_LOCAL_REPO": "imagebuild-e2e-scratch"}


def test_local_cpu_image_carries_labels_manifest_and_tags(local_cpu: Any) -> None:
    entry = local_cpu.report["targets"][0]
    assert entry["ok"] and entry["target"] == "local-cpu" and entry["image_id"].startswith("sha256:")
    inspect = json.loads(docker("image", "inspect", local_cpu.image_id).stdout)[0]
    labels = inspect["Config"]["Labels"]
    committed = json.loads((REPO / "dockerfiles/local-cpu/manifest.json").read_text())
    assert labels["io.imagebuild.target"] == "local-cpu"
    assert labels["io.imagebuild.torch"] == committed["torch"]["version"]
    assert len(labels["io.imagebuild.matrix-sha256"]) == 64
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert labels["org.opencontainers.image.revision"].startswith(head)
    short = local_cpu.tags[1].split(":", 1)[1]
    assert local_cpu.tags[0] == "imagebuild:local-cpu" and short.startswith("local-cpu-")
    assert set(local_cpu.tags) <= set(inspect["RepoTags"])
    inside = docker(
        "run", "--rm", "--network", "host", "--entrypoint", "cat", local_cpu.image_id, "/opt/imagebuild/manifest.json"
    ).stdout
    assert json.loads(inside) == committed


def test_cached_rebuild_reports_cached_steps_and_same_image(local_cpu: Any, tmp_path: Path) -> None:
    """A rebuild with nothing changed runs no step and makes the same image: its layers, its config, its ID.

    Under a local repository of its own (IMAGEBUILD_LOCAL_REPO), so the session's imagebuild:local-cpu keeps
    naming the image later tests run. The ID is the config digest on a graph-driver engine and the manifest digest
    on the containerd store; builds load without BuildKit's provenance attestation, whose build times made the
    containerd store's local index (and so the ID) new on every build ("there is no such thing as reproducible
    provenance", moby/buildkit#3421)."""
    # The context is content-addressed: a new mtime on a staged wheel must not bust the cache.
    for wheel in (REPO / "build" / "wheelhouse").glob("*.whl"):
        os.utime(wheel)
    report = tmp_path / "again.json"
    env = {"IMAGEBUILD_LOCAL_REPO": f"imagebuild-e2e-rebuild-{uuid.uuid4().hex[:8]}"}
    only = ("--platform", "linux/amd64")
    run = imagebuild("build", "local-cpu", *only, "--report", str(report), env=env)
    assert run.returncode == 0, run.output[-3000:]
    entry = json.loads(report.read_text())["targets"][0]
    try:
        assert entry["total_steps"] > 0 and entry["cached_steps"] == entry["total_steps"]
        assert Path(entry["log"]).read_text().count("CACHED") >= entry["cached_steps"]
        first, again = (
            json.loads(docker("image", "inspect", i).stdout)[0] for i in (local_cpu.image_id, entry["image_id"])
        )
        assert again["RootFS"]["Layers"] == first["RootFS"]["Layers"]
        assert again["Config"] == first["Config"]  # labels from git, not the clock: reproducible
        assert entry["image_id"] == local_cpu.image_id
    finally:
        for tag in entry["tags"]:
            docker("rmi", tag, check=False)


def test_a_second_cached_build_reuses_the_post_build_work(local_cpu: Any, tmp_path: Path) -> None:
    """Issue 31 item 6: the build after a cached one (same built image) does not scan coverage or write the SBOM
    again. On the containerd store the last final image used to vanish when the next build took its tags (an
    untagged image is deleted there), so every cached build redid the work; its hold tag keeps it."""
    repo = f"imagebuild-e2e-post-{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report.json"
    args = ("build", "local-cpu", "--platform", "linux/amd64", "--report", str(report))
    runs = [imagebuild(*args, env={"IMAGEBUILD_LOCAL_REPO": repo}) for _ in "12"]
    try:
        assert all(r.returncode == 0 for r in runs), runs[-1].output[-3000:]
        said = "post-build work of local-cpu reused"
        assert said not in runs[0].stderr and said in runs[1].stderr, runs[1].stderr[-2000:]
        held = docker("image", "inspect", "--format", "{{.Id}}", f"{repo}-post-cache:local-cpu").stdout.strip()
        final = json.loads(report.read_text())["targets"][0]["image_id"]
        assert held == final and docker("image", "inspect", f"{repo}:local-cpu").returncode == 0
        # the image BuildKit gave is not left behind once the final one replaced it (15 GB for the CUDA image)
        built = json.loads((tmp_path / "post" / "local-cpu.json").read_text())["built"]
        assert built != final and docker("image", "inspect", built, check=False).returncode != 0
    finally:
        for tag in (f"{repo}:local-cpu", f"{repo}-post-cache:local-cpu"):
            docker("rmi", tag, check=False)
        for tag in json.loads(report.read_text())["targets"][0]["tags"] if report.exists() else []:
            docker("rmi", tag, check=False)


def test_dry_run_prints_the_command_and_changes_nothing(engine: str, tmp_path: Path) -> None:
    tag = f"dry-run-{uuid.uuid4().hex[:8]}"
    log = REPO / "build/logs/local-cpu.log"
    log_before = log.stat().st_mtime_ns if log.exists() else None
    report = tmp_path / "never.json"
    run = imagebuild("build", "local-cpu", "--dry-run", "--tag", tag, "--report", str(report))
    assert run.returncode == 0, run.output
    assert "--network host" in run.stdout and f"-t imagebuild:{tag}" in run.stdout
    assert not report.exists() and (log.stat().st_mtime_ns if log.exists() else None) == log_before
    assert docker("image", "inspect", f"imagebuild:{tag}", check=False).returncode != 0


def _scratch_repo(tmp_path: Path, dockerfile: str) -> Path:
    """A repository copy holding the real matrix and a hand-written local-cpu Dockerfile."""
    root = tmp_path / "repo"
    (root / "dockerfiles/local-cpu").mkdir(parents=True)
    shutil.copy(REPO / "matrix.yaml", root / "matrix.yaml")
    shutil.copy(REPO / "dockerfiles/local-cpu/manifest.json", root / "dockerfiles/local-cpu/manifest.json")
    (root / "dockerfiles/local-cpu/Dockerfile").write_text(dockerfile)
    return root


def test_broken_step_exits_3_and_names_the_step(engine: str, tmp_path: Path) -> None:
    nonce = uuid.uuid4().hex[:8]
    root = _scratch_repo(
        tmp_path,
        f"FROM local/debian:bookworm\nRUN echo fine-{nonce}\n"
        "RUN seq 1 60 | sed 's/^/noise /' && echo about-to-break && exit 7\n",
    )
    # the scratch repository holds the amd64 Dockerfile only
    run = imagebuild(
        "--matrix", str(root / "matrix.yaml"), "build", "local-cpu", "--platform", "linux/amd64", env=SCRATCH_ENV
    )
    assert run.returncode == 3, run.output[-3000:]
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "echo about-to-break && exit 7" in error
    assert "Traceback" not in run.output
    entry = json.loads((root / "build/build-report.json").read_text())["targets"][0]
    assert entry["ok"] is False and entry["image_id"] is None
    assert "exit 7" in entry["failed_step"] and any("about-to-break" in line for line in entry["log_tail"])
    # the tail is the step's own output (its last lines), not BuildKit's Dockerfile excerpt; and it is printed
    tail = entry["log_tail"]
    cause = next(i for i, line in enumerate(tail) if line == "about-to-break")
    assert tail[cause - 1] == "noise 60" and all(line.startswith(("#", "ERROR")) for line in tail[cause + 1 :])
    assert not any("Dockerfile:" in line for line in tail)
    assert "  | about-to-break" in run.stdout


def test_parallel_jobs_keep_each_result(engine: str, tmp_path: Path) -> None:
    """One failing target does not lose another's result: the lead's matrix has one CPU target, so two
    scratch matrices are built at once through the library, as `--jobs 2` does."""
    from imagebuild.building.buildkit import BuildSpec, run_builds
    from imagebuild.building.secrets import collect_secrets
    from imagebuild.engine.docker import find_engine

    good = tmp_path / "good.Dockerfile"
    bad = tmp_path / "bad.Dockerfile"
    good.write_text(f"FROM local/debian:bookworm\nRUN echo ok-{uuid.uuid4().hex[:6]} > /ok\n")
    bad.write_text("FROM local/debian:bookworm\nRUN exit 9\n")
    specs = [
        BuildSpec("good", tmp_path, good, ["imagebuild-e2e:good"], log_path=tmp_path / "good.log"),
        BuildSpec("bad", tmp_path, bad, ["imagebuild-e2e:bad"], log_path=tmp_path / "bad.log"),
    ]
    secrets = collect_secrets({})
    results = run_builds(specs, find_engine(), secrets, jobs=2)
    secrets.cleanup()
    assert [r.ok for r in results] == [True, False]
    assert results[0].image_id and "exit 9" in (results[1].failed_step or "")
    assert (tmp_path / "good.log").is_file() and (tmp_path / "bad.log").is_file()


def test_no_engine_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    for args in (
        ("build", "local-cpu"),
        ("smoke", "local-cpu"),
        ("publish", "local-cpu", "--registry", "127.0.0.1:5000/x"),
    ):
        run = imagebuild(*args, env=env)
        assert run.returncode == 2, (args, run.output)
        lines = run.stderr.strip().splitlines()
        assert lines[-1].startswith("error: ") and "engine" in lines[-1] and "Traceback" not in run.stderr


def test_planted_secret_never_reaches_history_layers_or_logs(engine: str, tmp_path: Path) -> None:
    planted = f"PLANTED-{uuid.uuid4().hex}"
    index_url = f"https://ci-user:{planted}@pypi.invalid/simple"
    nonce = uuid.uuid4().hex[:8]
    # The step uses the secret and even prints it: the worst a Dockerfile can do. The image keeps its hash
    # only, which proves the secret arrived.
    root = _scratch_repo(
        tmp_path,
        "FROM local/debian:bookworm\n"
        f"RUN --mount=type=secret,id=pipindex echo nonce-{nonce} && sha256sum /run/secrets/pipindex > /secret.sha"
        " && cat /run/secrets/pipindex\n",
    )
    report = tmp_path / "report.json"
    run = imagebuild(
        "--matrix",
        str(root / "matrix.yaml"),
        "build",
        "local-cpu",
        "--platform",
        "linux/amd64",  # the scratch repository holds the amd64 Dockerfile only
        "--report",
        str(report),
        env={**SCRATCH_ENV, "PIP_INDEX_URL": index_url, "GITHUB_ACTIONS": "true"},
    )
    assert run.returncode == 0, run.output[-3000:]
    entry = json.loads(report.read_text())["targets"][0]
    image = entry["image_id"]
    # No python3 in this image, so no torch or component to judge: recorded and said, not a failed build.
    assert entry["coverage"] == "not scanned: no python3 in the image"
    assert "warning: local-cpu: arch coverage not scanned: no python3 in the image" in run.stderr
    import hashlib

    inside = docker("run", "--rm", "--network", "host", image, "cat", "/secret.sha").stdout
    assert inside.split()[0] == hashlib.sha256(index_url.encode()).hexdigest()
    history = docker("history", "--no-trunc", image).stdout
    inspect = docker("image", "inspect", image).stdout
    saved = tmp_path / "image.tar"
    docker("save", "-o", str(saved), image)
    layers_hit = []
    with tarfile.open(saved) as outer:
        for member in outer.getmembers():
            if member.isfile():
                data = outer.extractfile(member).read()  # type: ignore[union-attr]
                if planted.encode() in data:
                    layers_hit.append(member.name)
    log = Path(entry["log"]).read_text()
    assert "***" in log  # the printed value was there, and was scrubbed
    for where, text in {
        "history": history,
        "inspect": inspect,
        "build log": log,
        "report": report.read_text(),
        "cli output": run.output,
    }.items():
        assert planted not in text, f"secret leaked into {where}"
    assert layers_hit == []
    assert "::group::build local-cpu: ok" in run.stdout and "::endgroup::" in run.stdout  # CI log grouping
    assert os.environ.get("PIP_INDEX_URL") != index_url
    subprocess.run([DOCKER, "rmi", "-f", image], capture_output=True, check=False)
