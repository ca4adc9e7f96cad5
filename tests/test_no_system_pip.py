"""No `pip install` outside a virtual environment in what a user or a runner runs (issue 29): Debian 12 and Ubuntu 24.04
refuse pip into the system interpreter (PEP 668, externally-managed-environment), so every such command fails there,
and on a machine that allows it, it changes the system's Python behind the distribution's back.

What counts, in scripts/, .github/, .ci/, docs/ and README.md:
- a command is `pip install`, `pip3 install` or `<python> -m pip install` (also `... -m pip3 install`);
- it runs inside a virtual environment when the pip or python it names is a path `<prefix>/bin/<pip|pip3|python|
  python3|python3.N>` whose prefix is not a system one (`/usr`, `/usr/local`, `/`, `~/.local`): e.g.
  `"$VENV/bin/python" -m pip install`, `"$RUNNER_TEMP/venv/bin/python" -m pip install`. `uv pip install` installs
  into a virtual environment unless it says `--system`. Anything else (`pip install`, `python3 -m pip install`,
  `sudo pip install`, `/usr/bin/python3 -m pip install`) is outside one;
- `pip install --dry-run` installs nothing (a probe that the system refuses pip, as the stock-Debian rehearsal
  makes) and is exempt;
- image contexts are not the host: Dockerfiles (a file named Dockerfile*, or *.Dockerfile) and Dockerfile `RUN`
  lines anywhere are exempt (an image's own interpreter is the image's business);
- shell, YAML and Python text: every line but comments (a line whose first non-blank character is `#`);
- Markdown: the commands a reader copies, i.e. fenced code blocks (no language, or bash/sh/shell/console/zsh);
  inline code in prose describes (an upstream Dockerfile's line, an image stage) and is not a command to run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("scripts", ".github", ".ci", "docs", "README.md")
SYSTEM_PREFIXES = {"", "/usr", "/usr/local", "~/.local", "$HOME/.local", "${HOME}/.local"}
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh"}
TEXT_SUFFIXES = {"", ".sh", ".py", ".yml", ".yaml", ".md", ".txt", ".toml", ".cfg", ".bash"}
MODULE = re.compile(r"""(?P<inv>[^\s;&|()`]+)\s+-m\s+pip3?\s+install\b""")
DIRECT = re.compile(r"""(?P<before>\S+\s+)?(?P<inv>[^\s;&|()`]*\bpip3?)["']?\s+install\b""")
VENV_BIN = re.compile(r"(?P<prefix>.*)/bin/(?:pip3?|python3?(?:\.\d+)?)")


def in_a_venv(invoker: str) -> bool:
    found = VENV_BIN.fullmatch(invoker.strip("\"'`"))
    return bool(found) and found["prefix"].rstrip("/") not in SYSTEM_PREFIXES


def dry_run(line: str, end: int) -> bool:
    """The command whose `install` ends at `end` says --dry-run (before the next ;, &, | or `)."""
    return bool(re.match(r"[^;&|`]*\s--dry-run\b", line[end:]))


def outside_venv(line: str) -> list[str]:
    """The pip-install commands of one line that do not run inside a virtual environment."""
    if re.match(r"\s*RUN\b", line):  # a Dockerfile instruction: the image's interpreter
        return []
    bad = [m.group(0) for m in MODULE.finditer(line) if not in_a_venv(m["inv"]) and not dry_run(line, m.end())]
    for m in DIRECT.finditer(line):
        before = (m["before"] or "").strip().strip("\"'")
        if before == "-m":  # `<python> -m pip install`: MODULE judged it by its python
            continue
        if before == "uv":
            if "--system" in line:
                bad.append(m.group(0))
            continue
        if not in_a_venv(m["inv"]) and not dry_run(line, m.end()):
            bad.append(m.group(0).strip())
    return bad


def commands(path: Path, text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text that is run: see the module docstring."""
    if path.name.startswith("Dockerfile") or path.suffix == ".Dockerfile":
        return []
    lines = text.splitlines()
    if path.suffix != ".md":
        return [(n, line) for n, line in enumerate(lines, 1) if not line.lstrip().startswith("#")]
    out, fence = [], None
    for n, line in enumerate(lines, 1):
        opened = re.match(r"\s*(```+|~~~+)\s*([\w+-]*)", line)
        if opened and fence is None:
            fence = (opened.group(1), opened.group(2).lower())
        elif opened and fence is not None and line.strip().startswith(fence[0]):
            fence = None
        elif fence is not None and fence[1] in SHELL_FENCES:
            out.append((n, line))
    return out


def violations(path: Path, text: str) -> list[str]:
    return [f"{path}:{n}: {cmd}" for n, line in commands(path, text) for cmd in outside_venv(line)]


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for root in ROOTS:
        base = REPO / root
        if base.is_file():
            files.append(base)
        elif base.is_dir():
            files += [p for p in sorted(base.rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return files


@pytest.mark.parametrize(
    ("name", "text", "caught"),
    [
        ("a.sh", "python3 -m pip install -e .\n", True),
        ("a.sh", "pip install torch\n", True),
        ("a.sh", "sudo pip3 install click\n", True),
        ("a.sh", "/usr/bin/python3 -m pip install x\n", True),
        ("a.yml", "          run: python -m pip install -r requirements.txt\n", True),
        ("a.sh", 'cd /x && "$VENV/bin/python" -m pip install -q -e "${REPO}[test]"\n', False),
        ("a.sh", '"$RUNNER_TEMP/venv/bin/pip" install --require-hashes -r req.txt\n', False),
        ("a.sh", 'log "${VENV}/bin/pip install -e .[test]"\n', False),
        ("a.sh", "# Debian refuses `pip install` into the system interpreter\n", False),
        ("a.sh", "uv pip install x\n", False),
        ("a.sh", "/usr/bin/python3 -m pip install --dry-run click 2>&1 | tail -n1\n", False),
        ("a.sh", "python3 -m pip install x; echo --dry-run\n", True),
        ("a.sh", "uv pip install --system x\n", True),
        ("Dockerfile", "RUN pip install x\n", False),
        ("a.py", 'DOCKERFILE = """\nRUN python3 -m pip install x\n"""\n', False),
        ("a.md", "Outside images: `pip install ./smoke` is prose.\n", False),
        ("a.md", "```bash\nsudo bash scripts/setup.sh\npip install ./smoke\n```\n", True),
        ("a.md", "```bash\n.venv/bin/pip install ./smoke\n```\n", False),
        ("a.md", "```yaml\nrun: pip install x\n```\n", False),
    ],
)
def test_the_rule_catches_pip_outside_a_venv_and_nothing_else(name: str, text: str, caught: bool) -> None:
    assert bool(violations(Path(name), text)) is caught, violations(Path(name), text)


def test_no_pip_install_outside_a_virtual_environment_in_scripts_workflow_and_docs() -> None:
    files = scanned_files()
    assert any(p.name == "images.yml" for p in files) and any(p.name == "setup.sh" for p in files)
    found = [v for p in files for v in violations(p.relative_to(REPO), p.read_text(errors="replace"))]
    assert not found, "pip install outside a virtual environment (tests/test_no_system_pip.py says what counts):\n" + (
        "\n".join(found)
    )
