"""scripts/setup.sh's Python steps (issue 29), run for real by sourcing the script (sourced, it only defines its
steps): everything pip installs goes into the checkout's venv, and torch comes from the wheelhouse's CPU wheel,
checked against matrix.lock.json, whether or not PIP_FIND_LINKS is set (a stock machine has none)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def setup_step(step: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "IMAGEBUILD_"))}
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "{REPO}/scripts/setup.sh"; {step}'],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_venv_is_the_checkouts_and_pip_never_runs_with_the_system_interpreter() -> None:
    run = setup_step('printf "%s\\n%s" "$VENV" "$SYSTEM_PYTHON"')
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(REPO / ".venv"), "/usr/bin/python3"]
    text = (REPO / "scripts" / "setup.sh").read_text()
    pip_lines = [
        line.strip() for line in text.splitlines() if "pip install" in line and not line.strip().startswith("#")
    ]
    assert pip_lines and all('"$VENV/bin/python" -m pip install' in line for line in pip_lines if "log " not in line)


def test_the_wheelhouse_without_pip_find_links_is_the_matrix_one() -> None:
    assert setup_step("wheelhouse_dir").stdout == "/opt/wheels"
    assert setup_step("wheelhouse_dir", PIP_FIND_LINKS="file:///srv/wheels /other").stdout == "/srv/wheels"


def test_the_torch_wheel_is_checked_against_the_lock(tmp_path: Path) -> None:
    lock = json.loads((REPO / "matrix.lock.json").read_text())
    pinned = {
        f["sha256"]
        for entry in lock["inputs"].values()
        for package in (entry.get("packages", ()) if isinstance(entry, dict) else ())
        for f in package.get("files", ())
        if f.get("file") == WHEEL
    }
    assert len(pinned) == 1
    got = setup_step("torch_wheel_sha256")
    assert got.returncode == 0 and got.stdout.strip() in pinned, got.stderr
    (tmp_path / WHEEL).write_bytes(b"not torch")  # a file of that name with other bytes: refused, one line
    bad = setup_step("ensure_torch_wheel", PIP_FIND_LINKS=str(tmp_path))
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip().splitlines()[-1] == (
        f"setup: {tmp_path / WHEEL} does not match matrix.lock.json's sha256 {got.stdout.strip()}"
    )


def test_the_debian_series_of_a_pin_is_its_upstream_major_minor() -> None:
    pins = ["1:10.0.13+ds-0+deb13u1", "28.5.2+dfsg4-5", "1.7.24~ds1-6+deb13u1", "0.29.1+ds1-4", "2.5.0-2+b5"]
    run = subprocess.run(
        ["bash", "-c", f'source "{REPO}/scripts/setup.sh"; for v in "$@"; do debian_series "$v"; done', "-", *pins],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.stdout.split() == ["10.0", "28.5", "1.7", "0.29", "2.5"], run.stderr


def test_a_pin_gone_from_the_suite_takes_its_series_newest_and_says_so_against_the_real_mirror(
    tmp_path: Path,
) -> None:
    """A point release replaces the pinned .deb on the mirror: setup goes on with the same series, said in one line;
    a pin of a series the suite no longer has is one error line (Debian trixie's `hello`, 2.10-x, fetched for real)."""
    gone = setup_step(f'suite_fetch trixie "{tmp_path}" hello 2.10-0.1 && dpkg-deb -f "{tmp_path}"/hello_*.deb Version')
    assert gone.returncode == 0, gone.stderr
    taken = gone.stdout.strip()
    assert taken.startswith("2.10-") and taken != "2.10-0.1"
    assert f"setup: hello 2.10-0.1 is no longer in Debian trixie: taking {taken}, the same 2.10 series" in gone.stderr
    assert (tmp_path / "x" / "usr" / "bin" / "hello").is_file()
    other = setup_step(f'suite_fetch trixie "{tmp_path}" hello 1.3-1')
    assert other.returncode == 1
    assert other.stderr.strip().splitlines()[-1] == (
        f"setup: hello 1.3-1 is not in Debian trixie, nor any hello 1.3.x (it has: {taken}): "
        "setup.sh's pin needs updating"
    )
    exact = setup_step(f'suite_fetch trixie "{tmp_path}" hello {taken}')
    assert exact.returncode == 0 and "no longer" not in exact.stderr, exact.stderr
