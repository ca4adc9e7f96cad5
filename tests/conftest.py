"""Shared fixtures: the repository root and a CLI runner that reports exit code, stdout and stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagebuild.cli import main

REPO = Path(__file__).resolve().parents[1]


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
