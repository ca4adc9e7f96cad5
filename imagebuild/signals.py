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
