"""The house rules of the layout (issue 20, docs/architecture.md): no import loop in imagebuild/ (type-checking
and function-level imports included), each stage folder imports only the folders its row allows, no function
over 80 lines, and only engine/ starts docker."""

from __future__ import annotations

import ast
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
    "build": {"plan", "matrix", "render", "engine", "lock"},
    "prove": {"build", "plan", "matrix", "engine"},
    "release": {"build", "plan", "matrix", "engine", "lock"},
    "tunableop": {"matrix", "engine"},
    "report": {"release", "plan", "matrix", "engine"},
    "commands": {"matrix", "plan", "render", "build", "engine", "prove", "release", "tunableop", "lock", "report"},
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


def test_only_the_engine_starts_docker() -> None:
    """A subprocess whose argv starts with the engine's client (engine.client, "docker") is the engine's alone."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "engine":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in {"run", "Popen", "check_output", "call"} or not node.args:
                continue
            first = node.args[0]
            head = first.elts[0] if isinstance(first, ast.List) and first.elts else None
            text = ast.unparse(head) if head is not None else ""
            if "client" in text or "docker" in text or "cosign" in text or "skopeo" in text:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {text}")
    assert offenders == []
