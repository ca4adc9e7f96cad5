"""Issue 30: the README's commands stay true. Every command in a README code block runs here and must exit 0,
except the few this module names in SKIPPED with the reason (the two setup commands, real builds, smokes and pushes).
The README is parsed, not copied: a command added to a code block is run by the next test run, or the test fails
until it is given a reason to skip.

Commands that read what the quick start published (its loopback-registry repository and its key pair under
build/keys/) run in tests/e2e/test_readme_commands_e2e.py, against a signed publish of that test's own: a unit test
cannot assume README command 1 ran on this machine.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
# What the quick start leaves behind for the README's next commands; the e2e test substitutes its own.
QUICKSTART_REPOSITORY = "127.0.0.1:5000/imagebuild"
QUICKSTART_KEYS = "build/keys/"


@dataclass(frozen=True)
class Command:
    line: int  # where it starts in the README
    text: str  # as written, continuation lines joined
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text}"


def commands(markdown: str) -> list[Command]:
    """Every command in the fenced shell (or unlabelled) code blocks, `\\`-continued lines joined, comments and
    leading VAR=value assignments taken apart."""
    found: list[Command] = []
    fence: str | None = None
    pending, start = "", 0
    for number, raw in enumerate(markdown.split("\n"), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip().lower()
            continue
        if fence is None or fence not in SHELL_FENCES:
            continue
        if not pending:
            start = number
        pending += (" " if pending else "") + stripped
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        text, pending = pending, ""
        words = shlex.split(text, comments=True)
        env = {}
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words:
            found.append(Command(start, text.split(" #", 1)[0].strip(), tuple(words), env))
    return found


# Commands that cannot run in a unit test, each with why; matched on the argv's first words (a build, smoke or
# publish that is not a --dry-run is a real one: tests/e2e builds, smokes and publishes local-cpu for real).
SKIPPED: dict[tuple[str, ...], str] = {
    ("bash", "scripts/quickstart.sh"): "README command 1: installs packages and engines, builds, smokes and publishes "
    "(minutes); .ci/run runs it before the tests",
    ("bash", "scripts/test.sh"): "README command 2: runs this very suite (it would run itself); .ci/run runs it",
    ("imagebuild", "build"): "a real build (tens of minutes for a GPU target); the e2e suite builds local-cpu",
    ("imagebuild", "smoke"): "a real smoke needs the built image (and for a GPU target the GPU); the e2e suite smokes",
    ("imagebuild", "publish"): "a real push; the e2e suite publishes, signs and verifies local-cpu",
    ("imagebuild", "doctor"): "answers about this host's GPU: exit 1 for a GPU target on a CPU machine, by design",
}


def skip_reason(command: Command) -> str | None:
    if "--dry-run" in command.argv:
        return None  # a dry run changes nothing: it always runs
    for prefix, why in SKIPPED.items():
        if command.argv[: len(prefix)] == prefix:
            return why
    return None


def needs_quickstart(command: Command) -> bool:
    """Reads the quick start's publish (its repository or key pair): run by the e2e test, substituted."""
    return any(QUICKSTART_REPOSITORY in word or QUICKSTART_KEYS in word for word in command.argv)


def run(command: Command, argv: tuple[str, ...] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """The command as a user's shell runs it after `source .venv/bin/activate`: this interpreter's bin first."""
    argv = argv or command.argv
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, **command.env}
    exe = shutil.which(argv[0], path=path)
    assert exe is not None, f"{command}: {argv[0]} is not on PATH"
    return subprocess.run([exe, *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def failure(command: Command, proc: subprocess.CompletedProcess[str]) -> str:
    return f"{command} exited {proc.returncode}:\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}"


README_COMMANDS = commands(README.read_text(encoding="utf-8"))
LOCAL = [c for c in README_COMMANDS if skip_reason(c) is None and not needs_quickstart(c)]


def test_the_readme_shows_the_two_commands_and_what_comes_next() -> None:
    argvs = [c.argv for c in README_COMMANDS]
    assert argvs[:2] == [("bash", "scripts/quickstart.sh"), ("bash", "scripts/test.sh")], "the two commands first"
    assert all(skip_reason(c) for c in README_COMMANDS[:2])
    subcommands = {c.argv[1] for c in README_COMMANDS if c.argv[0] == "imagebuild"}
    assert {"arches", "build", "verify", "report"} <= subcommands, subcommands
    assert [c for c in README_COMMANDS if c.argv[0] == "imagebuild" and "--dry-run" in c.argv], "a dry run is shown"
    assert LOCAL, "nothing left to run here"


@pytest.mark.parametrize("command", LOCAL, ids=[f"line{c.line}" for c in LOCAL])
def test_a_readme_command_runs(command: Command) -> None:
    proc = run(command)
    assert proc.returncode == 0, failure(command, proc)
    assert proc.stdout.strip(), f"{command} printed nothing"


def test_the_parser_joins_continuations_drops_comments_and_reads_assignments() -> None:
    markdown = (
        "text `imagebuild not-a-block`\n```bash\n# only a comment\nimagebuild arches local-cpu   # a comment\n"
        "FOO=1 imagebuild build x \\\n  --dry-run  # more\n```\n```yaml\nrun: imagebuild render\n```\n"
        "```\nbash scripts/test.sh\n```\n"
    )
    found = commands(markdown)
    assert [(c.line, c.argv, c.env) for c in found] == [
        (4, ("imagebuild", "arches", "local-cpu"), {}),
        (5, ("imagebuild", "build", "x", "--dry-run"), {"FOO": "1"}),
        (12, ("bash", "scripts/test.sh"), {}),
    ]
    assert skip_reason(found[1]) is None and skip_reason(found[2])


def test_a_broken_readme_command_fails(tmp_path: Path) -> None:
    """What the parametrized test does with a command the CLI refuses: a non-zero exit, reported with its line."""
    (broken,) = commands("```bash\nimagebuild arches local-cpu --arch sm_999\n```\n")
    assert skip_reason(broken) is None and not needs_quickstart(broken)
    proc = run(broken, cwd=REPO)
    assert proc.returncode == 2 and "error:" in proc.stderr, failure(broken, proc)
    assert failure(broken, proc).startswith("README.md:2: imagebuild arches local-cpu --arch sm_999 exited 2")


NAMED_PATH = re.compile(
    r"`((?:docs|scripts|bench|tests|kernels|schema|runtimes|dockerfiles|image|smoke|imagecontract|imagebuild|\.ci)"
    r"/[^`\s]*)`"
)


@pytest.mark.parametrize("doc", ["README.md", "docs/reference.md"])
def test_every_file_the_front_door_and_the_reference_name_exists(doc: str) -> None:
    """The reference moved out of the README (issue 30): a path either names in backticks must still be there
    (placeholders such as `<target>`, globs and `...` are not paths; `path:line` is checked as path)."""
    text = (REPO / doc).read_text(encoding="utf-8")
    named = {m.group(1).split(":")[0] for m in NAMED_PATH.finditer(text)}
    real = {p for p in named if not re.search(r"[<>*{}\[\]]|\.\.\.", p)}
    assert len(real) > 10, sorted(real)
    assert sorted(p for p in real if not (REPO / p).exists()) == []
