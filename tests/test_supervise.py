"""scripts/supervise.sh (issue 29): the engines and the registry setup.sh starts run under it, so a daemon that dies
is started again; `imagebuild doctor` says which engine answers where, since when, and whether anything keeps it
running. A real supervisor loop and a real daemon (a unix socket server that, like dockerd, makes its socket when it
starts); nothing mocked."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from imagebuild.prove.doctor import engine_lines, engine_since

REPO = Path(__file__).resolve().parents[1]
SUPERVISE = REPO / "scripts" / "supervise.sh"
DAEMON = (
    "import os, socket, sys, time\n"
    "path = sys.argv[1]\n"
    "os.path.exists(path) and os.unlink(path)\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.bind(path)\n"
    "s.listen()\n"
    "time.sleep(600)\n"
)
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def wait_for(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")


def alive(pid: int) -> bool:
    try:
        return b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower()
    except OSError:
        return False


def test_a_dead_daemon_is_started_again_and_doctor_says_who_keeps_it(tmp_path: Path) -> None:
    sock, supervise_dir = tmp_path / "engine.sock", tmp_path / "supervise"
    state = supervise_dir / "engine"
    loop = subprocess.Popen(
        ["bash", str(SUPERVISE), str(state), str(sock), "--", sys.executable, "-c", DAEMON, str(sock)],
        start_new_session=True,
    )
    try:
        wait_for(lambda: sock.exists() and (state / "child.pid").exists())
        first = int((state / "child.pid").read_text())
        facts = engine_since(f"unix://{sock}", supervise_dir)
        assert facts["supervised"] == {"name": "engine", "pid": loop.pid, "running": True, "restarts": 0}
        assert ISO.fullmatch(str(facts["since"])), facts
        lines = engine_lines(
            {**facts, "version": "28.5.2", "store": "containerd", "buildkit": "0.25.1", "builds_with": "buildx"}
        )
        assert lines[0].startswith(f"engine: Docker 28.5.2 answers on unix://{sock} since ")
        assert f"  kept running by scripts/supervise.sh (pid {loop.pid}, started again 0 times)" in lines

        os.kill(first, signal.SIGKILL)  # the daemon dies: the loop starts it again
        wait_for(lambda: int((state / "child.pid").read_text()) != first and (state / "restarts").read_text() == "1\n")
        second = int((state / "child.pid").read_text())
        wait_for(lambda: alive(second) and sock.exists())
        assert engine_since(f"unix://{sock}", supervise_dir)["supervised"]["restarts"] == 1  # type: ignore[index]
        assert "exited" in (state / "daemon.log").read_text()
    finally:
        loop.send_signal(signal.SIGTERM)
        loop.wait(timeout=30)
    # stopping the loop stops its daemon, and doctor then says nothing keeps the engine running
    wait_for(lambda: not alive(second))
    assert engine_since(f"unix://{sock}", supervise_dir)["supervised"] == {"running": False}
    line = engine_lines({"error": "no engine", "address": f"unix://{sock}", "supervised": {"running": False}})
    assert line[0] == f"engine: none on unix://{sock} (no engine)" and "bash scripts/setup.sh starts one" in line[1]


def test_a_pid_file_naming_another_process_is_not_a_supervisor(tmp_path: Path) -> None:
    """A stale supervisor.pid whose number now belongs to some other process (here: this test) is not taken as a
    live supervisor."""
    state = tmp_path / "supervise" / "engine"
    state.mkdir(parents=True)
    (state / "socket").write_text(f"{tmp_path / 'engine.sock'}\n")
    (state / "supervisor.pid").write_text(f"{os.getpid()}\n")
    facts = engine_since(f"unix://{tmp_path / 'engine.sock'}", tmp_path / "supervise")
    assert facts["supervised"] == {"name": "engine", "pid": os.getpid(), "running": False}
    assert facts["since"] is None  # no socket: nothing answers there


def test_an_address_that_is_not_a_unix_socket_has_no_since() -> None:
    assert engine_since("tcp://127.0.0.1:2375") == {
        "address": "tcp://127.0.0.1:2375",
        "since": None,
        "supervised": None,
    }
