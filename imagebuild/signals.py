"""SIGTERM handled as SIGINT is: the one place the CLI installs it (issue 34).

`docker stop`, systemd, CI runners' cancel and `timeout` send SIGTERM, whose default action ends the process at
once: no `finally` runs, so a smoke's container and volume, or a promote's half-written `.sig`/`.att` tags, stay
behind. SIGINT already unwinds the stack as KeyboardInterrupt, every cleanup path below a command catches that,
and the CLI turns it into one `error:` line; SIGTERM raises `Terminated`, a KeyboardInterrupt, so it takes the same
path, and the CLI exits 128 + 15 for it (143, as a shell reports a SIGTERM'd process) instead of 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds exactly as SIGINT's KeyboardInterrupt does (every `except KeyboardInterrupt` and
    `finally` runs); the CLI exits EXIT_TERMINATED for it."""

    exit_code = EXIT_TERMINATED


def _during_cleanup(signum: int, frame: FrameType | None) -> None:
    """A second SIGTERM while the first one's cleanup runs: not cut short (a handler, not SIG_IGN, which a child
    process started during the cleanup would inherit across exec)."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, _during_cleanup)
    raise Terminated()


def install_sigterm_as_interrupt() -> bool:
    """Make SIGTERM raise `Terminated` in the main thread (where Python runs signal handlers); False, nothing
    changed, when called from another thread (signal.signal would refuse) or when SIGTERM is ignored (a caller
    that set SIG_IGN, e.g. nohup-like wrappers, keeps its choice)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return False
    signal.signal(signal.SIGTERM, _raise_terminated)
    return True


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside the block are raised when it ends, not in the middle of it.

    For a step that must not be cut in two: starting a child process. subprocess.Popen does not kill a child
    it already forked when KeyboardInterrupt lands before it returns, so the child (cosign writing a `.sig`)
    would outlive us; with the interrupt deferred, Popen returns, the caller holds the process and its
    `except BaseException` kills it. Outside the main thread (no handlers can be set there) the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[signal.Signals] = []
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def record(signum: int, frame: FrameType | None) -> None:
        arrived.append(signal.Signals(signum))

    for signum, handler in saved.items():
        if callable(handler):  # a Python handler (KeyboardInterrupt's, Terminated's): deferred; SIG_IGN/SIG_DFL kept
            signal.signal(signum, record)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if callable(handler):
                signal.signal(signum, handler)
        if arrived:  # the first that came, handled now as it would have been
            handler = saved[arrived[0]]
            if callable(handler):
                handler(arrived[0], None)
