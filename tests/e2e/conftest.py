"""Fixtures of the end-to-end tests: a real engine, the loopback registry, scratch registries that a test
may stop, and the local-cpu image built once per session (the slow part) and shared by every test.

Without an engine these tests skip, unless IMAGEBUILD_REQUIRE_ENGINE=1 (CI), where they fail instead.

Engines (issues 22, 29): the default engine (DOCKER_HOST, else /var/run/docker.sock: Docker 28.5 with the containerd
image store, as scripts/setup.sh starts it), or IMAGEBUILD_ENGINE=docker26 / docker20 for a compatibility engine
(Docker 26.1, containerd store, or 20.10, each on its own socket: IMAGEBUILD_DOCKER26_SOCK, IMAGEBUILD_DOCKER20_SOCK).
Tests marked engine_compat are the build, smoke and publish path that .ci/run runs against 26.1 and 20.10 too; on
20.10 local_cpu builds linux/amd64 alone (20.10 builds each platform apart, the arm64 one emulated: the current
engine's run covers both).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from e2e_helpers import DOCKER, REGISTRY, Run, _unavailable, imagebuild

ENGINES = ("default", "docker26", "docker20")
# Compatibility engines setup.sh starts beside the default (Docker 28.5, issue 29): name -> (variable, socket)
ENGINE_SOCKETS = {
    "docker26": ("IMAGEBUILD_DOCKER26_SOCK", "/var/run/imagebuild-docker26.sock"),
    "docker20": ("IMAGEBUILD_DOCKER20_SOCK", "/var/run/imagebuild-docker20.sock"),
}
# The build, smoke and publish path on one platform: what the compatibility run (IMAGEBUILD_ENGINE=docker20) runs.
COMPAT = {
    "test_build_e2e.py::test_local_cpu_image_carries_labels_manifest_and_tags",
    "test_build_e2e.py::test_broken_step_exits_3_and_names_the_step",
    "test_smoke_publish_e2e.py::test_smoke_runs_in_the_container_and_records_the_image_id",
    "test_smoke_publish_e2e.py::test_publish_then_pull_back_by_digest",
    "test_smoke_publish_e2e.py::test_failing_smoke_exits_4_and_cannot_be_published",
    "test_smoke_publish_e2e.py::test_promote_copies_a_staged_digest_to_another_repository",
    "test_engine_media_types_e2e.py::test_docker20_pushes_docker_schema2",
    "test_engine_media_types_e2e.py::test_doctor_reports_the_engine_and_refuses_a_missing_feature",
    "test_engine_media_types_e2e.py::test_publish_oci_on_an_engine_without_it_pushes_nothing",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engine_compat: the build, smoke and publish path; .ci/run runs it on Docker 20.10 too"
    )
    chosen = os.environ.get("IMAGEBUILD_ENGINE", "default")
    if chosen not in ENGINES:
        raise pytest.UsageError(f"IMAGEBUILD_ENGINE={chosen!r} is not one of {', '.join(ENGINES)}")
    if chosen in ENGINE_SOCKETS:  # the CLI subprocesses and docker calls of every test inherit it
        variable, default = ENGINE_SOCKETS[chosen]
        os.environ["DOCKER_HOST"] = "unix://" + os.environ.get(variable, default)


# Failing at the end of this round on Docker 26.1 (the containerd store), each with its cause; found in the last
# e2e run, not fixed in time. Declared here, in one place, reported by -ra as XFAIL/XPASS, never silent. Remove a
# line when its test passes (XPASS says so).
KNOWN_FAILING: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        key = f"{item.path.name}::{item.name}"
        if key in COMPAT:
            item.add_marker(pytest.mark.engine_compat)
        if key in KNOWN_FAILING:
            item.add_marker(pytest.mark.xfail(strict=False, reason=KNOWN_FAILING[key]))


def compat_run() -> bool:
    return os.environ.get("IMAGEBUILD_ENGINE") == "docker20"


@pytest.fixture(scope="session")
def engine() -> str:
    from imagebuild.engine.docker import find_engine
    from imagebuild.errors import ConfigError

    try:
        return find_engine().describe()
    except ConfigError as exc:
        _unavailable(f"no container engine: {exc}")
        raise


@pytest.fixture(scope="session")
def registry(engine: str) -> str:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5).raise_for_status()
    except requests.RequestException as exc:
        _unavailable(f"no registry on {REGISTRY}: {exc}")
    return REGISTRY


class ScratchRegistry:
    """A docker-registry of its own on a free loopback port, which a test may stop and start again."""

    def __init__(self, root: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.root = root
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.config = root / "config.yml"
        self.config.write_text(
            "version: 0.1\nlog: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: {self.addr}}}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.root / "registry.log", "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(self.config)], stdout=log, stderr=log, start_new_session=True
        )
        for _ in range(80):
            try:
                requests.get(f"http://{self.addr}/v2/", timeout=1)
                return
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"scratch registry on {self.addr} did not start; see {self.root / 'registry.log'}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def uploads_started(self) -> bool:
        return any((self.root / "data").rglob("_uploads"))


@pytest.fixture
def scratch_registry(engine: str, tmp_path: Path) -> Iterator[ScratchRegistry]:
    if shutil.which("docker-registry") is None:
        _unavailable("docker-registry is not installed")
    reg = ScratchRegistry(tmp_path / "registry")
    reg.start()
    yield reg
    reg.stop()


@dataclass
class Built:
    image_id: str
    tags: list[str]
    report: dict[str, Any]
    report_path: Path
    build: Run


@pytest.fixture(scope="session")
def local_cpu(engine: str, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`imagebuild build local-cpu` once per session (cached after the first CI run on a machine)."""
    report_path = tmp_path_factory.mktemp("build") / "build-report.json"
    only = ("--platform", "linux/amd64") if compat_run() else ()
    run = imagebuild("build", "local-cpu", *only, "--report", str(report_path))
    assert run.returncode == 0, run.output[-4000:]
    report = json.loads(report_path.read_text())
    entry = report["targets"][0]
    return Built(entry["image_id"], entry["tags"], report, report_path, run)


@pytest.fixture(scope="session")
def smoked_local_cpu(local_cpu: Built, tmp_path_factory: pytest.TempPathFactory) -> tuple[Built, Path]:
    """local-cpu smoked on CPU in its container; returns the build and the smoke report path."""
    report = tmp_path_factory.mktemp("smoke") / "report.json"
    run = imagebuild("smoke", "local-cpu", "--platform", "linux/amd64", "--gpu", "none", "--report", str(report))
    assert run.returncode == 0, run.output[-4000:]
    return local_cpu, report


@pytest.fixture(scope="session")
def smoked_arm64(local_cpu: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """local-cpu's linux/arm64 image (built once, by local_cpu's build of every platform) smoked under emulation."""
    report = tmp_path_factory.mktemp("smoke-arm64") / "report.json"
    run = imagebuild("smoke", "local-cpu", "--platform", "linux/arm64", "--gpu", "none", "--report", str(report))
    assert run.returncode == 0, run.output[-4000:]
    assert "(emulated)" in run.stderr and "gpu=none" in run.stderr, run.stderr[-2000:]
    return report


@pytest.fixture(scope="session")
def failing_image(local_cpu: Built) -> str:
    """A tiny image FROM local-cpu whose manifest claims imagebuild-kernels, which is uninstalled: smoke fails."""
    tag = "imagebuild-e2e:smoke-fails"
    dockerfile = f"FROM {local_cpu.tags[1]}\nRUN pip uninstall -y imagebuild-kernels\n"  # BuildKit: FROM needs a name
    proc = subprocess.run(
        [DOCKER, "build", "-q", "--network", "host", "-t", tag, "-"],
        input=dockerfile,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return tag
