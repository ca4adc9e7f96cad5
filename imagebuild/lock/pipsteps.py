"""The pip steps of a Dockerfile, each judged: does it install only files a hashed set names, or resolve live?

One implementation for both readers: the build's lock label (io.imagebuild.lock records the steps that were not
from a hashed set; publish calls an image fully locked only when there are none: imagebuild.lock.stages) and the
test that scans every rendered Dockerfile (tests/test_pip_steps.py).

A step is a pip call (`pip`, `pip3`, `python3 -m pip`, `uv pip`) in a RUN instruction, or a command known to run
one (`make gen-server`: TGI@232e8d52 server/Makefile:13 runs `pip install grpcio-tools==1.51.1 ...`). It is

- `hashed`: `--no-deps --require-hashes --only-binary=:all:` with only `-r` files: pip refuses any line without a
  sha256, the set is complete (nothing else is resolved), and no sdist is built (its build backend would be
  installed without hashes);
- `local`: `--no-deps` with only paths (wheels built by an earlier stage, a source folder here): nothing comes
  from an index; a source folder also needs `--no-build-isolation` (else pip installs its build backend live);
- `git`: `--no-deps --no-build-isolation` with only `name @ git+https://...@<40-hex commit>` (pip cannot hash a
  VCS requirement; the commit is the content's hash, as for every git input of the lock);
- `no-index`: `--no-index` or `PIP_NO_INDEX=1` with no `--find-links`: pip may take only what is installed;
- `live`: anything else (a name from an index without a hash, a source build with isolation, an unparseable RUN).

Anything not understood is `live`: the judgement fails closed.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

# A git requirement pinned by commit, the only form the final stage takes from the lock's `vcs` list (and the
# only `git` step): a name, `@ git+https://`, a URL without spaces, quotes or `@`, a 40-hex commit, an optional
# environment marker. Anything else is refused by render and judged live here.
GIT_PINNED = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]* @ git\+https://[A-Za-z0-9._~/:-]+@[0-9a-f]{40}( ?; ?[A-Za-z0-9_ .<>=!\"'-]+)?$"
)
MAX_SHOWN = 200  # characters of a step's command in a label or message
MAX_STEPS = 1000  # pip steps of one Dockerfile (the real ones have a dozen)
MAX_DEPTH = 4  # `sh -c` inside `sh -c` read this deep; deeper is judged live
# Commands that run pip themselves, and where (a Makefile recipe the Dockerfile cannot show).
INDIRECT = {("make", "gen-server"): "TGI's server/Makefile gen-server recipe runs pip install"}
# pip options that take a value (the value is never a requirement); any other option is taken as a flag, so an
# unknown option's value is read as a requirement and the step is judged live (fails closed).
VALUED = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-w", "--wheel-dir", "-t", "--target", "--platform", "--python-version",
    "--implementation", "--abi", "--only-binary", "--no-binary", "--prefix", "--root", "--cache-dir",
    "--progress-bar", "--global-option", "--config-settings", "-C", "--upgrade-strategy", "--src", "--log",
    "--python", "-p", "--trusted-host", "--cert", "--client-cert", "--proxy", "--retries", "--timeout",
    "--exists-action", "--report", "--root-user-action", "--dest", "-d",
}  # fmt: skip
PIP_COMMANDS = {"install", "wheel", "download", "sync"}
LEADING = {"if", "then", "else", "elif", "do", "while", "until", "{", "!", "exec", "env", "time", "command"}
SEPARATORS = re.compile(r"^[;&|()<>]+$")
SHELLS = {"sh", "bash", "dash"}
HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?")


@dataclass(frozen=True)
class Step:
    stage: str
    line: int  # of the RUN instruction, 1-based
    command: str  # the pip call as one line, at most MAX_SHOWN characters
    kind: str  # hashed | local | git | no-index | live
    why: str

    def describe(self) -> str:
        return f"{self.stage}: {self.command}"


def steps(dockerfile: str) -> list[Step]:
    """Every pip step of dockerfile, in order, judged."""
    found: list[Step] = []
    stage = ""
    for line, instruction in _instructions(dockerfile):
        word = instruction.split(None, 1)[0].upper() if instruction.strip() else ""
        if word == "FROM":
            parts = instruction.split()
            stage = parts[3] if len(parts) >= 4 and parts[2].upper() == "AS" else parts[-1]
        elif word == "RUN":
            found += _run_steps(stage, line, instruction.split(None, 1)[1] if " " in instruction else "")
        if len(found) > MAX_STEPS:
            raise ValueError(f"more than {MAX_STEPS} pip steps in one Dockerfile")
    return found


def unhashed(dockerfile: str) -> list[str]:
    """`stage: command` of each step that resolves live (empty: every pip step installs only pinned files)."""
    return [step.describe() for step in steps(dockerfile) if step.kind == "live"]


def _instructions(text: str) -> list[tuple[int, str]]:
    """(first line, instruction with its continuations joined) of each instruction; comment lines inside a
    continued instruction dropped, as the Dockerfile parser drops them. A RUN with a heredoc (`<<EOF` ... `EOF`)
    takes its lines up to the delimiter, kept as lines (_run_steps judges such a RUN as a whole)."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        raw = lines[index]
        index += 1
        stripped = raw.strip()
        if stripped.startswith("#") or (not current and not stripped):
            continue
        if not current:
            start = index
        if raw.rstrip().endswith("\\"):
            current.append(raw.rstrip()[:-1])
            continue
        current.append(raw)
        joined = " ".join(part.strip() for part in current)
        current = []
        heredoc = HEREDOC.search(joined) if joined.split(None, 1)[0].upper() == "RUN" else None
        if heredoc:
            ends = [i for i in range(index, len(lines)) if lines[i].strip() == heredoc.group(1)]
            if ends:
                joined += "\n" + "\n".join(lines[index : ends[0] + 1])
                index = ends[0] + 1
        out.append((start, joined))
    if current:
        out.append((start, " ".join(part.strip() for part in current)))
    return out


def _run_steps(stage: str, line: int, body: str, depth: int = 0) -> list[Step]:
    words = body.split()
    while words and words[0].startswith("--"):  # RUN's own flags (--mount=..., --network=...)
        words.pop(0)
    shell = body[body.find(words[0]) :] if words else ""
    if HEREDOC.search(shell):
        if "pip" in shell or "make" in shell:
            return [Step(stage, line, _shown(shell), "live", "a heredoc RUN is not read word by word")]
        return []
    if shell.startswith("["):  # the exec form: a JSON array of words, no shell
        try:
            argv = json.loads(shell)
        except ValueError:
            argv = None
        if isinstance(argv, list) and all(isinstance(w, str) for w in argv):
            step = _judge(stage, line, argv, {})
            return [step] if step is not None else []
        if "pip" in shell or "make" in shell:
            return [Step(stage, line, _shown(shell), "live", "the RUN's exec form cannot be read")]
        return []
    try:
        lexer = shlex.shlex(shell, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        if "pip" in shell or "make" in shell:
            return [Step(stage, line, _shown(shell), "live", "the RUN's shell words cannot be read")]
        return []
    out: list[Step] = []
    exported: dict[str, str] = {}
    for command in _simple_commands(tokens):
        assigned, words = _assignments(command)
        if words[:1] == ["export"]:
            exported.update(_assignments(words[1:])[0])
            continue
        env = {**exported, **assigned}
        if words and words[0].rsplit("/", 1)[-1] in SHELLS and "-c" in words[1:-1]:  # sh -c '...': its words too
            script = words[words.index("-c", 1) + 1]
            if depth >= MAX_DEPTH:
                out.append(Step(stage, line, _shown(script), "live", f"shells nested deeper than {MAX_DEPTH}"))
            else:
                out += _run_steps(stage, line, script, depth + 1)
            continue
        step = _judge(stage, line, words, env)
        if step is not None:
            out.append(step)
    return out


def _simple_commands(tokens: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for token in tokens:
        if SEPARATORS.match(token):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _assignments(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(leading VAR=value assignments, the rest), shell keywords before the command dropped."""
    assigned: dict[str, str] = {}
    rest = list(words)
    while rest:
        if rest[0] in LEADING:
            rest.pop(0)
            continue
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", rest[0])
        if not match:
            break
        assigned[match.group(1)] = match.group(2)
        rest.pop(0)
    return assigned, rest


def _pip_args(words: list[str]) -> list[str] | None:
    """The arguments after `pip` when words is a pip call, else None."""
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    if re.fullmatch(r"pip(3(\.\d+)?)?", name):
        return words[1:]
    if re.fullmatch(r"python(3(\.\d+)?)?", name) and words[1:3] == ["-m", "pip"]:
        return words[3:]
    if name == "uv" and words[1:2] == ["pip"]:
        return words[2:]
    return None


def _judge(stage: str, line: int, words: list[str], env: dict[str, str]) -> Step | None:
    shown = _shown(" ".join(words))
    no_index_env = env.get("PIP_NO_INDEX", "").lower() in {"1", "true", "yes", "on"}
    for (program, target), why in INDIRECT.items():
        if words and words[0].rsplit("/", 1)[-1] == program and target in words[1:]:
            if no_index_env:
                return Step(stage, line, shown, "no-index", f"{why}; PIP_NO_INDEX=1: only what is installed")
            return Step(stage, line, shown, "live", f"{why}, from the index without hashes")
    args = _pip_args(words)
    if args is None:
        return None
    flags, values, positionals = _parse(args)
    if not positionals or positionals[0] not in PIP_COMMANDS:
        return None
    subcommand, positionals = positionals[0], positionals[1:]
    requirement_files = values.get("-r", [])
    no_deps = "--no-deps" in flags
    isolated = "--no-build-isolation" not in flags
    if (no_index_env or "--no-index" in flags) and not values.get("-f"):
        return Step(stage, line, shown, "no-index", "no index: only what is installed or named by path")
    wheels_only = ":all:" in values.get("--only-binary", [])
    if subcommand == "sync" and "--require-hashes" in flags and wheels_only and not positionals:
        return Step(stage, line, shown, "hashed", "uv pip sync of hashed files, wheels only")
    if no_deps and "--require-hashes" in flags and requirement_files and not positionals and "-e" not in values:
        if not wheels_only:
            return Step(stage, line, shown, "live", "a hashed set without --only-binary=:all:: an sdist's backend")
        return Step(stage, line, shown, "hashed", "every file by sha256, wheels only, nothing else resolved")
    if not no_deps:
        return Step(stage, line, shown, "live", "without --no-deps: dependencies resolve from the index")
    if requirement_files or "-e" in values:
        return Step(stage, line, shown, "live", "a requirements file without --require-hashes")
    if positionals and all(_is_path(p) for p in positionals):
        if isolated and not all(p.endswith(".whl") for p in positionals):
            return Step(stage, line, shown, "live", "a source build with build isolation: its backend resolves live")
        return Step(stage, line, shown, "local", "paths only (wheels or a source built here)")
    if positionals and all(GIT_PINNED.match(p) for p in positionals):
        if isolated:
            return Step(stage, line, shown, "live", "a git source built with isolation: its backend resolves live")
        return Step(stage, line, shown, "git", "git requirements pinned by commit")
    return Step(stage, line, shown, "live", "a requirement from an index without a hash")


def _parse(args: list[str]) -> tuple[set[str], dict[str, list[str]], list[str]]:
    """(flags, option values by canonical option, positionals) of pip's arguments."""
    canonical = {"--requirement": "-r", "--constraint": "-c", "--editable": "-e", "--find-links": "-f"}
    flags: set[str] = set()
    values: dict[str, list[str]] = {}
    positionals: list[str] = []
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "--":
            positionals += words
            break
        if word.startswith("-") and len(word) > 1:
            option, eq, value = word.partition("=")
            if not eq and option in VALUED:
                value = words.pop(0) if words else ""
                eq = "="
            if not eq and len(option) > 2 and not option.startswith("--") and option[:2] in VALUED:
                option, value, eq = option[:2], option[2:], "="  # -rfile
            if eq:
                values.setdefault(canonical.get(option, option), []).append(value)
            else:
                flags.add(option)
        else:
            positionals.append(word)
    return flags, values, positionals


def _is_path(word: str) -> bool:
    return word.startswith(("/", "./", "../")) or word == "."


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."
