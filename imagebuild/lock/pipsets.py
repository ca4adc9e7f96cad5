"""pip inputs: every `pip install` of every stage, fully resolved with hashes by uv.

Why uv (`uv pip compile`) and not pip-tools: it resolves for a target that is not the interpreter it runs on
(`--python-version 3.10 --python-platform x86_64-manylinux_2_28`: the images' Python and platform, from a host
with Python 3.11; pip-compile resolves for its own interpreter only), and its PEP 751 output (`pylock.toml`)
names each file with its URL, size and sha256, so the lock records the exact file a build installs. It is a
maintained Astral project, installed from PyPI by scripts/setup.sh (pyproject `test` extra), pinned.

Each set is resolved under the pins of the sets installed before it (`after`: the base stage's setuptools stays
69.5.1 when torch's requirements would move it) and, after the torch stage, under `torch==<version>` with torch's
own packages (torch, triton, nvidia-*) left to the torch stage. A requirement by git URL cannot be hashed by pip:
it is kept verbatim (pinned by its commit) and a stand-in release resolves its dependencies.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from imagebuild.lock.inputs import TORCH_OWNED_PREFIXES

UV_VERSION = "0.13.9"
# A git-URL requirement -> the release that stands in for it while resolving (its dependencies), and why.
# TGI@232e8d52:server/poetry.lock:3029-3030: transformers at b8aee2e is 4.41.0.dev0; 4.41.0 is that release.
STAND_INS = {"transformers": "transformers==4.41.0"}
MAX_OUTPUT = 600


class ResolveError(Exception):
    """uv could not resolve a set (index unreachable, no such version, conflict)."""


def uv_version() -> str:
    try:
        out = subprocess.run(["uv", "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        raise ResolveError("uv is not installed (scripts/setup.sh installs it: pip install uv)") from None
    return out.strip()


def name_of(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return _normal(match.group(1)) if match else ""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def gen_server_requirements(makefile: str, target: str) -> list[str]:
    """The arguments of `pip install` in a Makefile target's recipe (options dropped)."""
    lines = makefile.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    except StopIteration:
        raise ResolveError(f"the Makefile has no target {target}") from None
    found: list[str] = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        if "pip install" in line:
            words = shlex.split(line.split("pip install", 1)[1])
            found += [w for w in words if not w.startswith("-")]
    return found


def part_requirements(text: str, part: str) -> list[str]:
    """The requirements one part of a source file names, read without running anything:
    `build-system.requires` of a pyproject.toml, or `setup.install_requires`: the first `install_requires = [...]`
    list of plain strings in a setup.py (parsed by ast; an expression that is not such a list is refused)."""
    if part == "build-system.requires":
        try:
            found = tomllib.loads(text).get("build-system", {}).get("requires")
        except tomllib.TOMLDecodeError as exc:
            raise ResolveError(f"pyproject.toml is not TOML: {exc}") from None
    elif part == "setup.install_requires":
        found = _install_requires(text)
    else:
        raise ResolveError(f"no reader for the part {part!r}")
    if not isinstance(found, list) or not found or not all(isinstance(r, str) for r in found):
        raise ResolveError(f"{part}: no list of requirement strings in the file")
    return [r.strip() for r in found]


def _install_requires(text: str) -> list[str] | None:
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ResolveError("setup.py cannot be parsed") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "install_requires" for t in node.targets
        ):
            value = node.value
            if isinstance(value, ast.List) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
            ):
                return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            raise ResolveError(f"setup.py line {node.lineno}: install_requires is not a list of strings")
    return None


def requirement_lines(text: str) -> list[str]:
    """Requirement lines of a requirements file (comments, blanks and options dropped)."""
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            out.append(line)
    return out


def resolve(
    spec: dict[str, Any],
    requirements: list[str],
    constraints: list[str],
    limit: float,
    package_dir: Path | None = None,
    extras: list[str] | None = None,
) -> dict[str, Any]:
    """The lock entry fields of one set: every package with its exact file(s) and sha256, and pip's lines."""
    vcs = [r for r in requirements if re.search(r"@\s*git\+", r)]
    plain = [r for r in requirements if r not in vcs]
    overrides = [STAND_INS[name_of(r)] for r in vcs if name_of(r) in STAND_INS]
    unknown = [r for r in vcs if name_of(r) not in STAND_INS]
    if unknown:
        raise ResolveError(f"no stand-in release for the git requirement {unknown[0][:120]}")
    if package_dir is not None:
        plain.append(f"{package_dir}[{','.join(extras or [])}]" if extras else str(package_dir))
        # the package names its git dependencies itself: the same stand-ins override them
        overrides = sorted(set(overrides) | set(STAND_INS.values()))
    if spec.get("torch"):
        constraints = [*constraints, f"torch=={spec['torch']}"]
    lock = _compile(spec, plain, constraints, overrides, limit)
    exclude = {name_of(o) for o in overrides} | ({_normal(package_dir.name)} if package_dir is not None else set())
    packages = _packages(lock, exclude, bool(spec.get("torch")))
    entry: dict[str, Any] = {"packages": packages, "requirements": requirements_text(packages)}
    if vcs:
        entry["vcs"] = vcs
        entry["stand_ins"] = {r: STAND_INS[name_of(r)] for r in vcs}
    return entry


def _compile(
    spec: dict[str, Any], plain: list[str], constraints: list[str], overrides: list[str], limit: float
) -> dict[str, Any]:
    """uv pip compile of the set for the spec's Python and platform; its PEP 751 document."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-lock-pip-") as scratch:
        work = Path(scratch)
        for name, lines in (("in.txt", plain), ("constraints.txt", constraints), ("overrides.txt", overrides)):
            (work / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        out = work / "pylock.toml"
        # Every value as --option=value (a value can never be read as an option), the one positional after --.
        cmd = ["uv", "pip", "compile", "--no-config", "--quiet", f"--python-version={spec['python']}"]
        cmd += [f"--python-platform={spec['platform']}", f"--index-url={spec['index_url']}"]
        cmd += [f"--constraint={work / 'constraints.txt'}", f"--override={work / 'overrides.txt'}"]
        cmd += [f"--output-file={out}", "--", str(work / "in.txt")]
        if spec.get("find_links"):
            cmd.insert(3, f"--find-links={os.environ.get('PIP_FIND_LINKS', spec['find_links'])}")
        if spec.get("no_deps"):
            cmd.insert(3, "--no-deps")
        if spec.get("extra_index_url"):  # uv prefers it to --index-url for a project both have (first-index)
            cmd.insert(3, f"--extra-index-url={spec['extra_index_url']}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
        env["UV_NO_CONFIG"] = "1"
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env, cwd=work)
        except subprocess.TimeoutExpired:
            raise ResolveError(f"uv did not finish within {limit:g} s") from None
        except OSError:
            raise ResolveError("uv is not installed (scripts/setup.sh installs it)") from None
        if done.returncode != 0:
            err = " ".join(line.strip() for line in done.stderr.strip().splitlines() if line.strip())
            raise ResolveError(err[:MAX_OUTPUT] or f"uv exit {done.returncode}")
        return tomllib.loads(out.read_text(encoding="utf-8"))


def _packages(lock: dict[str, Any], exclude: set[str], after_torch: bool) -> list[dict[str, Any]]:
    """Each package of uv's answer with its files, less the excluded ones, a local folder and (after the torch
    stage) torch's own packages."""
    packages = []
    for pkg in lock.get("packages", []):
        name = _normal(pkg["name"])
        if name in exclude or "directory" in pkg or (after_torch and name.startswith(TORCH_OWNED_PREFIXES)):
            continue
        files = [_file(w) for w in pkg.get("wheels", [])] or ([_file(pkg["sdist"])] if "sdist" in pkg else [])
        if not files:
            raise ResolveError(f"{pkg['name']} {pkg.get('version')}: no file to hash in uv's answer")
        packages.append({"name": pkg["name"], "version": pkg["version"], "files": files})
    return sorted(packages, key=lambda p: _normal(p["name"]))


def requirements_text(packages: list[dict[str, Any]]) -> list[str]:
    """pip's `--require-hashes` lines: `name==version --hash=sha256:...` (every file of that version listed)."""
    return [
        f"{p['name']}=={p['version']} " + " ".join(f"--hash=sha256:{f['sha256']}" for f in p["files"]) for p in packages
    ]


def _file(item: dict[str, Any]) -> dict[str, Any]:
    url = str(item.get("url") or item.get("path") or "")
    out: dict[str, Any] = {"file": unquote(url.rsplit("/", 1)[-1]), "sha256": item["hashes"]["sha256"], "url": url}
    if "size" in item:
        out["size"] = item["size"]
    return out
