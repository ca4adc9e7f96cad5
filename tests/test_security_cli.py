"""Issue 21, classes 5 and 7 on the host: numeric environment variables are ASCII digits of bounded length or a
located usage error (exit 2, one line naming the variable); `--platform ''` and a platform given twice are
refused at parse time; a duplicate in a target's `oci_platforms` is a located matrix error; SIGINT exits 130."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.engine.docker import engine_timeout
from imagebuild.engine.registry import deadline
from imagebuild.envvars import env_int
from imagebuild.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
DIGITS = "0123456789"
ODD = "٣３²_+-.x eE\u00a0"


def _valid(raw: str, low: float, high: float, seconds: bool) -> bool:
    core = raw.strip(" \t") if seconds else raw.strip(" \t\r\n")
    whole, dot, frac = core.partition(".") if seconds else (core, "", "")
    digits = bool(whole) and all(c in DIGITS for c in whole + frac) and (not dot or 0 < len(frac) <= 3)
    return digits and len(whole) <= (6 if seconds else 12) and low <= float(core) <= high


@SETTINGS
@given(raw=st.text(st.sampled_from(list(DIGITS + ODD)), min_size=1, max_size=16) | st.just("9" * 5000))
def test_numeric_variables_are_ascii_digits_or_a_located_error(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, reader, low, high, seconds in (
        ("IMAGEBUILD_ENGINE_TIMEOUT", engine_timeout, 0.1, 86_400, True),
        ("IMAGEBUILD_REGISTRY_DEADLINE", deadline, 0.1, 86_400, True),
        ("IMAGEBUILD_SMOKE_TIMEOUT", lambda: env_int("IMAGEBUILD_SMOKE_TIMEOUT", 7, minimum=1), 1, 10**12 - 1, False),
    ):
        monkeypatch.setenv(name, raw)
        if not raw.strip(" \t"):
            continue  # empty: the default
        if _valid(raw, low, high, seconds):
            assert reader() == float(raw.strip(" \t\r\n"))
            continue
        with pytest.raises(ConfigError) as caught:
            reader()
        message = str(caught.value)
        assert message.startswith(f"environment variable {name}=") and "\n" not in message and len(message) < 200


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["build", "local-cpu", "--platform", "", "--dry-run"], "--platform is empty"),
        (["build", "local-cpu", "--platform", "linux/arm64", "--platform", "linux/arm64", "--dry-run"], "twice"),
        (["render", "local-cpu", "--platform", " ", "--dry-run"], "--platform is empty"),
        (["smoke", "local-cpu", "--platform", ""], "--platform is empty"),
        (["publish", "local-cpu", "--registry", "127.0.0.1:1/x", "--platform", "linux//"], "not OS/ARCH"),
        (["publish", "local-cpu", "--registry", "127.0.0.1:1/x", "--tag", "bad tag!"], "is not a tag"),
        (["publish", "local-cpu", "--registry", "127.0.0.1:1/x", "--tag", "a" * 129], "is not a tag"),
    ],
)
def test_empty_or_repeated_platforms_and_bad_tags_are_refused(cli_subprocess, args: list[str], words: str) -> None:  # noqa: ANN001
    result = cli_subprocess(*args, env={"DOCKER_HOST": "tcp://127.0.0.1:1"})
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr


def test_a_platform_listed_twice_in_the_matrix_is_a_located_error(cli_subprocess, tmp_path: Path) -> None:  # noqa: ANN001
    text = (REPO / "matrix.yaml").read_text()
    listed = "oci_platforms: [linux/amd64, linux/arm64]"
    assert listed in text
    bad = tmp_path / "matrix.yaml"
    bad.write_text(text.replace(listed, "oci_platforms: [linux/amd64, linux/arm64, linux/amd64]", 1))  # local-cpu's
    for folder in ("kernels", "runtimes"):
        (tmp_path / folder).symlink_to(REPO / folder)
    result = cli_subprocess("--matrix", str(bad), "matrix", "list")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("targets[1].oci_platforms: linux/amd64 listed more than once"), result.stderr
    assert result.stderr.startswith(f"error: {bad}:") and len(result.stderr.strip().splitlines()) == 1


def test_sigint_exits_130_at_once_even_with_an_engine_that_never_answers() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    env = {**os.environ, "DOCKER_HOST": f"tcp://127.0.0.1:{server.getsockname()[1]}", "IMAGEBUILD_ENGINE_TIMEOUT": "60"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagebuild.cli", "doctor"], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        server.close()
    assert proc.returncode == 130 and err.strip() == "error: interrupted", err
    assert time.monotonic() - sent < 10
