"""Shared fixtures: the repository root and a CLI runner that reports exit code, stdout and stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import main

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """The suite's children start with SIGINT at its default even when pytest was started with it ignored.

    A shell without job control starts a background command (`cmd &`, `nohup`) with SIGINT ignored, an exec keeps
    that, and Python then installs no KeyboardInterrupt handler: the tests that interrupt a child (a smoke, a signed
    promote, doctor against a silent engine) saw it run on as if nothing came (4 failures in a backgrounded run of
    .ci/run here). A Python handler in this process becomes the default in every child it execs."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def cli():
    """Run the CLI in-process; an uncaught exception (a would-be traceback) is kept in `.exception`."""

    def run(*args: str, env: dict[str, str] | None = None) -> CliResult:
        runner = CliRunner()
        result = runner.invoke(main, list(args), env=env, catch_exceptions=True)
        exception = result.exception if not isinstance(result.exception, SystemExit) else None
        return CliResult(result.exit_code, result.stdout, result.stderr, exception)

    return run


@pytest.fixture
def cli_subprocess():
    """Run the real console entry point in a subprocess (what users and CI see, tracebacks included)."""

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> CliResult:
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.run(
            [sys.executable, "-m", "imagebuild.cli", *args],
            cwd=cwd or REPO,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr, None)

    return run


_BASE = "local/debian:bookworm"
_BASE_SEEN: list[str] = []  # the last engine test after which the base was still there


def _base_present() -> bool:
    probe = subprocess.run(["docker", "image", "inspect", _BASE], capture_output=True, check=False, timeout=60)
    return probe.returncode == 0


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Every engine test needs the local base images that scripts/setup.sh makes; when one vanishes, the test
    fails naming the last engine test that still saw it: that test (or its teardown) removed the shared base.

    Seen in CI on Docker 26.1: the coverage tests' teardown removed its images by ID, one of which was the base's
    own ID under another tag, and every later engine test failed on `No such image`."""
    if not item.get_closest_marker("docker"):
        return
    if _base_present():
        _BASE_SEEN[:] = [item.nodeid]
    elif _BASE_SEEN:
        pytest.fail(f"{_BASE} is gone from the engine; it was still there when {_BASE_SEEN[0]} started")
