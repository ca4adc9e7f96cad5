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
    "imagecontract/serve_guard.py build_app",
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
