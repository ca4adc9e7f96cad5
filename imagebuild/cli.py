"""The `imagebuild` command: parse, call, print, and map errors to the exit codes of the contract."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from imagebuild.errors import ImagebuildError

EXIT_INTERRUPTED = 130  # SIGINT (docs/contracts.md, exit codes)

# Each module under imagebuild/commands/ owns one command (group) and exposes it as `command`.
COMMAND_MODULES = [
    "matrix",
    "arches",
    "render",
    "tunableop",
    "build",
    "bake",
    "smoke",
    "publish",
    "kernels",
    "verify",
    "coverage",
    "doctor",
    "report",
    "lock",
]


class ErrorMappingGroup(click.Group):
    """Turns ImagebuildError into one `error: ...` line and its exit code; tracebacks only with --debug.

    Commands are imported when used (the name of a command is the name of its module), so a quick
    `render --check` does not pay for the docker SDK and friends.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMAND_MODULES:
            return None
        command: click.Command = importlib.import_module(f"imagebuild.commands.{cmd_name}").command
        return command

    def invoke(self, ctx: click.Context) -> Any:  # what the command returns, as click.Group.invoke says
        from imagebuild.signals import install_sigterm_as_interrupt

        install_sigterm_as_interrupt()  # SIGTERM unwinds like SIGINT: the cleanup below runs for both (issue 34)
        try:
            return super().invoke(ctx)
        except ImagebuildError as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (KeyboardInterrupt, click.exceptions.Abort) as exc:  # SIGINT: 128 + 2, as a shell says, never 1
            # ("a check found a difference"); the `finally` blocks below the command (containers, temp files) ran.
            # SIGTERM (imagebuild/signals.py): the same path, 128 + 15
            code = getattr(exc, "exit_code", EXIT_INTERRUPTED)
            click.echo("error: terminated (SIGTERM)" if code != EXIT_INTERRUPTED else "error: interrupted", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            # not sys.exit: a worker thread still blocked on an engine that never answers would be joined at
            # exit (concurrent.futures), so the process would outlive the interrupt by the engine's deadline
            os._exit(code)
        except (OSError, UnicodeError, ValueError) as exc:  # a file that cannot be written or read, or bytes that
            # are not the text / JSON a command expects: one line, exit 2 (commands/common.py says which)
            from imagebuild.commands.common import one_line

            message = one_line(exc)
            if message is None or ctx.params.get("debug"):
                raise
            click.echo(f"error: {message}", err=True)
            sys.exit(2)


@click.group(cls=ErrorMappingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--matrix",
    "matrix_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("matrix.yaml"),
    show_default=True,
    envvar="IMAGEBUILD_MATRIX",
    help="The matrix file: the single source of truth.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def main(ctx: click.Context, matrix_path: Path, debug: bool) -> None:
    """Build GPU serving images from matrix.yaml, smoke them on GPUs, publish them."""
    ctx.obj = {"matrix_path": matrix_path, "debug": debug}


if __name__ == "__main__":
    main()
