"""The checks, in the order they run; each module exposes ``run(ctx) -> CheckResult``."""

from __future__ import annotations

from collections.abc import Callable

from smoke.checks import attention, environment, imports, linear, runtime, silu, tunableop
from smoke.context import Context
from smoke.result import CheckResult

CHECKS: dict[str, Callable[[Context], CheckResult]] = {
    "environment": environment.run,
    "imports": imports.run,
    "silu": silu.run,
    "linear": linear.run,
    "attention": attention.run,
    "tunableop": tunableop.run,
    "runtime": runtime.run,
}
