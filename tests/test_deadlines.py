"""Deadlines (issue 12): an engine address that accepts and never answers, and a registry that trickles bytes,
each end the command with its own exit code and one `error:` line instead of holding it forever."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from imagebuild.engine.registry import Registry, RegistryError, RepoRef


@contextmanager
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never sends a byte (a stand-in for a wedged engine)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


@contextmanager
def trickling_registry(interval_s: float = 0.1) -> Iterator[int]:
    """An HTTP server that answers every request one byte at a time, forever (a stand-in for a slow registry)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\nDocker-Content-Digest: sha256:"
            try:
                for byte in head + b"0" * 100_000_000:
                    if stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(interval_s)
            except OSError:
                return

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = listener.accept()[0]
            except OSError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("smoke", "local-cpu", "--gpu", "none"),
        ("publish", "local-cpu", "--registry", "127.0.0.1:9/x"),
        ("build", "local-cpu", "--dry-run"),
    ],
)
def test_an_engine_that_never_answers_ends_the_command_with_exit_2(cli_subprocess, args: tuple[str, ...]) -> None:
    with silent_server() as port:
        started = time.monotonic()
        env = {"DOCKER_HOST": f"tcp://127.0.0.1:{port}", "IMAGEBUILD_ENGINE_TIMEOUT": "2"}
        result = cli_subprocess(*args, env=env)
        took = time.monotonic() - started
    assert result.exit_code == 2, result.stderr
    line = one_error_line(result.stderr)
    assert "engine" in line and ("2 s" in line or "no answer within 2 s" in line), line
    assert took < 30, f"took {took:.1f} s"


def test_a_trickling_registry_hits_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGEBUILD_REGISTRY_DEADLINE", "1.5")
    with trickling_registry() as port:
        registry = Registry(RepoRef.parse(f"127.0.0.1:{port}/x"))
        started = time.monotonic()
        with pytest.raises(RegistryError, match=r"no complete answer within 1.5 s") as caught:
            registry.digest("x", "latest")
        took = time.monotonic() - started
    assert not caught.value.transient  # a trickle is not retried into several deadlines
    assert 1.4 < took < 5, f"took {took:.1f} s"


def test_promote_from_a_trickling_registry_exits_5_with_one_line(cli_subprocess, tmp_path) -> None:
    with trickling_registry() as port:
        started = time.monotonic()
        result = cli_subprocess(
            "publish",
            "--promote",
            f"127.0.0.1:{port}/staging@sha256:{'a' * 64}",
            "--registry",
            f"127.0.0.1:{port}/public",
            "--allow-unsmoked",
            "--out",
            str(tmp_path / "published.json"),
            env={"IMAGEBUILD_REGISTRY_DEADLINE": "1.5"},
        )
        took = time.monotonic() - started
    assert result.exit_code == 5, result.stderr
    assert "within 1.5 s" in one_error_line(result.stderr)
    assert took < 20, f"took {took:.1f} s"
