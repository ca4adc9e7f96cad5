"""Helpers of the end-to-end tests (imported by conftest.py and the tests): the CLI in a subprocess,
docker, registry reads, unique names."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from imagebuild.engine.registry import MANIFEST_TYPES

REPO = Path(__file__).resolve().parents[2]
REGISTRY = os.environ.get("IMAGEBUILD_TEST_REGISTRY", "127.0.0.1:5000")
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
CLI = [sys.executable, "-c", "import sys; from imagebuild.cli import main; sys.exit(main())"]


def _unavailable(what: str) -> None:
    if os.environ.get("IMAGEBUILD_REQUIRE_ENGINE") == "1":
        pytest.fail(f"{what} (IMAGEBUILD_REQUIRE_ENGINE=1: run scripts/setup.sh)")
    pytest.skip(f"{what}; run scripts/setup.sh to start one")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def imagebuild(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: int = 1800) -> Run:
    """The real console entry point in a subprocess: what users and CI see."""
    proc = subprocess.run(
        [*CLI, *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def docker(*args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check, timeout=timeout)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def registry_digest(addr: str, repo: str, reference: str) -> str | None:
    response = requests.head(
        f"http://{addr}/v2/{repo}/manifests/{reference}",
        headers={"Accept": ", ".join(MANIFEST_TYPES)},  # Docker schema 2 (20.10) and OCI (26.1) alike
        timeout=10,
    )
    return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None
