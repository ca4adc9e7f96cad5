"""scripts/provision-runner.sh on a stock Debian 12 root filesystem (local/debian:bookworm: debootstrap's minbase, no
python3): before it, the runner's checks fail where a real runner would (no python3; then python3 without
python3-venv, the state the issue-26 docs left a runner in); after it, the runner's user makes a venv whose pip runs,
reaches the engine through the socket's group, and finds buildx, cosign and git; the job-started hook refuses a job
when no engine answers. Step 1 (setup.sh) is not run here (--no-setup): the host's engine (socket), docker, buildx and
cosign are handed in read-only, the same stand-ins the CI rehearsal uses (scripts/ci_rehearse.py _host_tools)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "provision-runner.sh"
BASE = "local/debian:bookworm"
sys.path.insert(0, str(REPO / "scripts"))
from ci_rehearse import _host_tools, _socket  # noqa: E402


def sh(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def stock_debian() -> Iterator[str]:
    if sh("docker", "version", timeout=30).returncode != 0:
        pytest.skip("no engine; run scripts/setup.sh")
    if sh("docker", "image", "inspect", BASE, timeout=30).returncode != 0:
        pytest.fail(f"no {BASE} (scripts/setup.sh makes it)")
    name = f"h7-provision-{uuid.uuid4().hex[:8]}"
    mounts = [f"{_socket()}:/var/run/docker.sock", f"{SCRIPT}:/src/scripts/provision-runner.sh:ro"]
    mounts += [f"{tool}:{tool}:ro" for tool in _host_tools()]
    argv = ["docker", "run", "-d", "--rm", "--name", name, "--network", "host", "--init"]
    argv += [a for m in mounts for a in ("-v", m)]
    started = sh(*argv, BASE, "sleep", "1200", timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        yield name
    finally:
        sh("docker", "rm", "-f", name, timeout=120)


def inside(name: str, script: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return sh("docker", "exec", name, "bash", "-c", script, timeout=timeout)


@pytest.mark.docker
def test_provisioning_makes_a_usable_runner_on_stock_debian(stock_debian: str) -> None:
    name = stock_debian
    check = "bash /src/scripts/provision-runner.sh --check"
    assert inside(name, "command -v python3 || echo none").stdout.strip() == "none"  # stock minbase
    inside(name, "useradd -m -s /bin/bash runner")
    before = inside(name, check)
    assert before.returncode == 1 and "error: python3 >= 3.11 missing" in before.stderr, before.stderr
    # what the issue-26 instructions left a runner with: the distribution's python3, no venv module
    apt = inside(name, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null")
    assert apt.returncode == 0, apt.stderr[-2000:]
    half = inside(name, check)
    assert half.returncode == 1 and "python3 -m venv fails" in half.stderr and "python3-venv" in half.stderr, (
        half.stderr
    )

    done = inside(name, "bash /src/scripts/provision-runner.sh --role builder --no-setup")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "checked as runner: python3 3.11" in done.stderr and "with venv and pip, engine " in done.stderr
    assert "--labels self-hosted,linux,x64,builder" in done.stdout and "--ephemeral" not in done.stdout
    assert "ACTIONS_RUNNER_HOOK_JOB_STARTED=/usr/local/lib/imagebuild-runner/job-started.sh" in done.stdout
    assert "no systemd here" in done.stderr  # said, not hidden: a container has no boot to survive
    assert inside(name, check).returncode == 0
    timer = inside(
        name, "cat /etc/systemd/system/imagebuild-engines.timer /etc/systemd/system/imagebuild-engines.service"
    )
    assert "OnBootSec=" in timer.stdout and "OnUnitInactiveSec=2min" in timer.stdout
    assert "ExecStart=/bin/bash /src/scripts/setup.sh" in timer.stdout
    # the job-started hook, as the runner: passes with an engine, refuses the job (exit 1, the reason) without
    hook = "/usr/local/lib/imagebuild-runner/job-started.sh"
    assert inside(name, f"setpriv --reuid=runner --regid=runner --init-groups {hook}").returncode == 0
    dead = inside(
        name, f"DOCKER_HOST=unix:///nonexistent.sock setpriv --reuid=runner --regid=runner --init-groups {hook}"
    )
    assert dead.returncode == 1 and "::error::no container engine answers" in dead.stdout
    # idempotent: a second run (after a re-image, or by habit) passes and changes nothing it should not
    again = inside(name, "bash /src/scripts/provision-runner.sh --role builder-pr --no-setup")
    assert again.returncode == 0 and "--ephemeral" in again.stdout, again.stderr[-2000:]
    groups = inside(name, "id -nG runner").stdout.split()
    assert len(groups) == len(set(groups))


def test_provisioning_refuses_bad_arguments_in_one_line() -> None:
    for args, why in [
        (["--role", "nope"], "--role: one of builder, builder-pr, gpu, release"),
        (["--user", "Bad;name"], "--user 'Bad;name'"),
        (["--bogus"], "unknown argument '--bogus'"),
    ]:
        proc = sh("bash", str(SCRIPT), *args, timeout=30)
        assert proc.returncode == 1 and proc.stderr.startswith("error: ") and why in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
