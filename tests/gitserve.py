"""A bare repository served by a real `git daemon` on 127.0.0.1, for the lock tests that fetch a git source."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(srv: Path, name: str = "r.git") -> Iterator[str]:
    """git://127.0.0.1:PORT/<name> for the bare repositories under srv, until the block ends; the whole process
    group is stopped (`git daemon` runs git-daemon as its child: killing the wrapper alone left it running)."""
    port = _free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--export-all", f"--base-path={srv}", "--listen=127.0.0.1", f"--port={port}",
         "--reuseaddr", str(srv)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"git://127.0.0.1:{port}/{name}"
    try:
        for _ in range(100):
            if subprocess.run(["git", "ls-remote", url], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        yield url
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
