"""The house rules of the layout (issue 20, docs/architecture.md): no import loop in imagebuild/ (type-checking
and function-level imports included), each stage folder imports only the folders its row allows, no function
over 80 lines, and only engine/ starts docker."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "imagebuild"
MAX_FUNCTION_LINES = 80
# Over 80 lines, written by work in flight beside issue 20 (issue 23's lock, issue 21's serve guard): to be split
# there; the list may only shrink (a name here that is no longer long fails too).
LONG_IN_FLIGHT = {
    "smoke/serve_guard.py build_app",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the imagebuild modules it imports anywhere in its text (top level, functions, TYPE_CHECKING)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out |= {m for a in node.names if (m := known(a.name))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if (m := full if full in modules else known(base)) is not None:
                        out.add(m)
        out.discard(name)
        edges[name] = out
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


# What each stage folder may import (docs/architecture.md, "The layout"); errors.py, envvars.py and the package
# version are everybody's. A folder always imports itself.
MAY_IMPORT = {
    "matrix": set(),
    "plan": {"matrix"},
    "lock": {"matrix", "engine"},
    "render": {"plan", "matrix", "lock"},
    "engine": {"plan"},  # plan/imageref.py: which image a target's build recorded
    "building": {"plan", "matrix", "render", "engine", "lock"},
    "prove": {"building", "plan", "matrix", "engine"},
    "release": {"building", "plan", "matrix", "engine", "lock"},
    "tunableop": {"matrix", "engine"},
    "report": {"release", "plan", "matrix", "engine"},
    "commands": {"matrix", "plan", "render", "building", "engine", "prove", "release", "tunableop", "lock", "report"},
}
SHARED = {"imagebuild", "imagebuild.errors", "imagebuild.envvars", "imagebuild.signals"}  # signals: stdlib only


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else module


def test_each_folder_imports_only_what_its_row_allows() -> None:
    edges = _imports(_modules())
    wrong = []
    for module, imported in sorted(edges.items()):
        folder = _folder(module)
        if folder not in MAY_IMPORT:
            continue  # cli.py, errors.py, envvars.py, the package itself
        for other in sorted(imported - SHARED):
            there = _folder(other)
            if there != folder and there not in MAY_IMPORT[folder]:
                wrong.append(f"{module} -> {other}")
    assert wrong == [], "add the folder to its MAY_IMPORT row (and docs/architecture.md) or move the code"


def test_no_command_imports_another() -> None:
    edges = _imports(_modules())
    shared = {"imagebuild.commands", "imagebuild.commands.common"}
    found = [
        f"{m} -> {o}"
        for m, imported in sorted(edges.items())
        if m.startswith("imagebuild.commands.") and m not in shared
        for o in sorted(imported)
        if o.startswith("imagebuild.commands") and o not in shared
    ]
    assert found == []


def test_every_stage_folder_has_its_row() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(MAY_IMPORT)
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert all(f"`{name}/`" in doc for name in folders), "docs/architecture.md draws every folder"


def test_no_import_loop_in_imagebuild() -> None:
    assert _cycles(_imports(_modules())) == []


def test_the_cycle_finder_finds_a_loop() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _long_functions(roots: list[Path]) -> list[str]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{path.relative_to(REPO)} {node.name}")
    return found


def test_no_function_over_80_lines() -> None:
    long = set(_long_functions([REPO / "imagebuild", REPO / "imagecontract", REPO / "smoke"]))
    assert long - LONG_IN_FLIGHT == set(), "split these into functions of at most 80 lines"
    assert LONG_IN_FLIGHT - long == set(), "no longer over 80 lines: take them off LONG_IN_FLIGHT"


# --- only engine/ speaks to the container engine (issue 30): no docker library, no docker/buildx/... process --------

ENGINE_TOOLS = ("docker", "buildx", "buildctl", "cosign", "skopeo")
# An identifier naming one of these, or the engine's client (`engine.client`, `client_path`, `docker_bin`), in an
# argv means the process is the engine's: a word of a snake_case or dotted name.
ENGINE_WORDS = {*ENGINE_TOOLS, "client", "engine"}
ENGINE_ARGV = {"build_prefix"}  # Engine.build_prefix(): the argv that starts a build, whatever the object is called
_TOOL_IN_TEXT = re.compile(r"(?:^|[\s/=])(?:" + "|".join(ENGINE_TOOLS) + r")(?:$|[\s.:-])")
# Calls that start a process: module -> function names (os.exec*/spawn*: every variant).
PROCESS_STARTS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "posix_spawn", "posix_spawnp", "fork", "forkpty"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn"},
}
OS_PREFIXES = ("exec", "spawn")
SCANNED = ("imagebuild", "imagecontract", "smoke")  # the packages; tests/, scripts/ and bench/ drive docker freely
# Exemptions (path relative to the repository -> why); none today. A path here that no longer needs it fails.
EXEMPT: dict[str, str] = {}


def _outside_engine() -> list[Path]:
    engine = PACKAGE / "engine"
    return [p for root in SCANNED for p in sorted((REPO / root).rglob("*.py")) if engine not in p.parents]


def docker_imports(tree: ast.AST) -> list[int]:
    """Lines that import the docker library in any form: `import docker[.x]`, `from docker[.x] import ...`, at any
    depth (functions, TYPE_CHECKING blocks, try/except), and importlib.import_module / __import__ of it."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "docker" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "docker":
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] in {"import_module", "__import__"}:
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and str(first.value).split(".")[0] == "docker":
                lines.append(node.lineno)
    return lines


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _start_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> `module.function` for every way a process-starting function can be reached in this file:
    `subprocess.run`, `import subprocess as sp` (`sp.run`), `from subprocess import run as go` (`go`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in PROCESS_STARTS:
                    names[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in PROCESS_STARTS:
            for a in node.names:
                if _starts(node.module, a.name):
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _starts(module: str, function: str) -> bool:
    return function in PROCESS_STARTS.get(module, set()) or (module == "os" and function.startswith(OS_PREFIXES))


def _process_start(call: ast.Call, names: dict[str, str]) -> str | None:
    """`module.function` when call starts a process, else None."""
    dotted = _dotted(call.func)
    head, _, rest = dotted.partition(".")
    if head not in names:
        return None
    full = names[head] + (f".{rest}" if rest else "")
    module, _, function = full.rpartition(".")
    return full if module in PROCESS_STARTS and _starts(module, function) else None


def _names_engine(node: ast.AST) -> bool:
    """Whether an expression names an engine tool: a string with one as a word (`docker`, `/usr/bin/docker`,
    `docker buildx build`), or an identifier with one as a word (`engine.client`, `docker_bin`, `cosign_binary()`)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _TOOL_IN_TEXT.search(sub.value):
            return True
        ident = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if ident is not None and (ident in ENGINE_ARGV or ENGINE_WORDS & set(ident.lower().split("_"))):
            return True
    return False


def _bindings(scope: ast.AST) -> dict[str, list[ast.AST]]:
    """name -> every value bound to it in scope: `=`, `+=`, annotated, walrus, `for name in`, and the arguments of
    `name.append/extend/insert(...)`."""
    found: dict[str, list[ast.AST]] = {}

    def bind(target: ast.AST, value: ast.AST | None) -> None:
        for name in _target_names(target):
            found.setdefault(name, []).extend([value] if value is not None else [])

    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target, node.value)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.NamedExpr):
            bind(node.target, node.value)
        elif isinstance(node, ast.For):
            bind(node.target, node.iter)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            if node.func.attr in {"append", "extend", "insert"}:
                found.setdefault(node.func.value.id, []).extend(node.args)
    return found


def _passed_in(scope: ast.AST, tree: ast.AST) -> dict[str, list[ast.AST]]:
    """A function's parameter -> the arguments its callers in the same file pass for it (`_run([client, ...])`
    and `pool.submit(_run, [client, ...])` start what the caller named). Callers in other files are not followed."""
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return {}
    params = [a.arg for a in [*scope.args.posonlyargs, *scope.args.args]]
    if params[:1] in (["self"], ["cls"]):
        params = params[1:]
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        handed = [i for i, a in enumerate(node.args) if _dotted(a).split(".")[-1] == scope.name]
        if handed:  # pool.submit(fn, argv), threading.Thread(target=...) aside: the arguments after the function
            for name, value in zip(params, node.args[handed[0] + 1 :], strict=False):
                found.setdefault(name, []).append(value)
        if _dotted(node.func).split(".")[-1] == scope.name:
            for name, value in zip(params, node.args, strict=False):
                found.setdefault(name, []).append(value)
            for keyword in node.keywords:
                if keyword.arg is not None:
                    found.setdefault(keyword.arg, []).append(keyword.value)
    return found


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _argv_names_engine(argv: ast.AST, bindings: dict[str, list[ast.AST]], seen: set[str] | None = None) -> bool:
    """The argv expression names an engine tool, itself or through the variables it is built from (followed
    through their bindings in the enclosing function and the module, every level, each variable once)."""
    if _names_engine(argv):
        return True
    seen = set() if seen is None else seen
    for name in {n.id for n in ast.walk(argv) if isinstance(n, ast.Name)} - seen:
        seen.add(name)
        if any(_argv_names_engine(value, bindings, seen) for value in bindings.get(name, [])):
            return True
    return False


def engine_process_starts(tree: ast.Module) -> list[str]:
    """`line function(argv)` of every process start whose argv (any positional argument, `args=`, `cmd=`, the
    `file`/`path` of exec and spawn) names an engine tool, directly or through a variable."""
    names = _start_names(tree)
    if not names:
        return []  # nothing in this file can start a process
    scope_of: dict[ast.AST, ast.AST] = {}  # each call -> its innermost function (variables are looked up there)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)]
    for function in sorted(functions, key=lambda f: f.lineno):  # outer first: inner functions overwrite
        for node in ast.walk(function):
            scope_of[node] = function
    module = _bindings(tree)
    bindings: dict[ast.AST, dict[str, list[ast.AST]]] = {}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (start := _process_start(node, names)) is None:
            continue
        scope = scope_of.get(node, tree)
        if scope not in bindings:  # the function's own bindings, what its callers in this file pass, the module's
            local = _bindings(scope)
            passed = _passed_in(scope, tree)
            names_here = {*local, *passed, *module}
            bindings[scope] = {n: local.get(n, []) + passed.get(n, []) + module.get(n, []) for n in names_here}
        argv = [*node.args, *(k.value for k in node.keywords if k.arg in {"args", "cmd", "file", "path", "argv"})]
        if any(_argv_names_engine(a, bindings[scope]) for a in argv):
            found.append(f"{node.lineno} {start}({ast.unparse(argv[0])[:80]})")
    return found


def test_nothing_outside_the_engine_imports_the_docker_library() -> None:
    """Only imagebuild/engine/ imports the docker SDK; every stage takes a ContainerEngine (engine/interface.py)."""
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for path in _outside_engine()
        if str(path.relative_to(REPO)) not in EXEMPT
        for line in docker_imports(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offenders == [], "move the docker call into imagebuild/engine/ and call it through ContainerEngine"


def test_only_the_engine_starts_docker() -> None:
    """A process whose argv names docker, buildx, buildctl, cosign or skopeo (or the engine's client) is started by
    imagebuild/engine/ alone: the build (engine.cli.start_build), a layer, an export, cosign."""
    offenders = []
    for path in _outside_engine():
        if str(path.relative_to(REPO)) in EXEMPT:
            continue
        offenders += [f"{path.relative_to(REPO)}:{hit}" for hit in engine_process_starts(ast.parse(path.read_text()))]
    assert offenders == [], "start it through imagebuild/engine/ (engine.cli, engine.cosign, engine.export)"
    assert all(not (REPO / p).exists() or _still_needed(REPO / p) for p in EXEMPT), "an exemption no longer needed"


def _still_needed(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return bool(docker_imports(tree) or engine_process_starts(tree))


def test_the_engine_rules_catch_what_they_forbid() -> None:
    """The checkers find each form (so a rule that passes is a rule that looked)."""
    caught = {
        "import docker": 1,
        "import docker.errors as e": 1,
        "from docker.errors import APIError": 1,
        "def f():\n    from docker import from_env": 1,
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import docker": 1,
        "import importlib\nimportlib.import_module('docker.errors')": 1,
        "import dockerfile_parse\nfrom imagebuild.engine import docker": 0,
    }
    for text, count in caught.items():
        assert len(docker_imports(ast.parse(text))) == count, text
    starts = {
        "import subprocess\nsubprocess.run(['docker', 'tag', 'a', 'b'])": 1,
        "import subprocess as sp\nsp.Popen(['/usr/bin/docker', 'build', '.'])": 1,
        "from subprocess import check_output as co\nco(['skopeo', 'inspect', 'x'])": 1,
        "import subprocess\ndef f(e):\n    argv = e.build_prefix() + ['-t', 'x']\n    subprocess.Popen(argv)": 1,
        "import subprocess\ndef f(engine):\n    argv = engine.build_prefix()\n    subprocess.Popen(argv)": 1,
        "import subprocess\ndef f(spec):\n    argv = [spec.client]\n    argv += ['x']\n    subprocess.run(argv)": 1,
        "import subprocess\ndef f():\n    cmd = ['x']\n    cmd.append('cosign')\n    subprocess.run(cmd)": 1,
        "import subprocess\nsubprocess.run('docker buildx build .', shell=True)": 1,
        "import os\nos.system('buildctl prune')": 1,
        "import os\nos.execvp('docker', ['docker', 'ps'])": 1,
        "import asyncio\nasync def f():\n    await asyncio.create_subprocess_exec('docker', 'ps')": 1,
        "import subprocess\nsubprocess.run(['git', 'rev-parse', 'HEAD'])": 0,
        "import subprocess\nsubprocess.run(['uv', 'pip', 'compile', 'dockerfiles/x.in'])": 0,
        "def f(engine, spec):\n    engine.run(spec)": 0,
        "import subprocess\ndef go(argv):\n    subprocess.run(argv)\ndef f(client):\n    go([client, 'ps'])": 1,
        "import subprocess\ndef go(argv):\n    subprocess.run(argv)\ndef f():\n    go(['git', 'status'])": 0,
    }
    for text, count in starts.items():
        assert len(engine_process_starts(ast.parse(text))) == count, text
