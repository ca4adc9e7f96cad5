"""imagecontract/ is standard-library only (docs/architecture.md, "The contract package"): the host installs it with
imagebuild and the images run it on their own Python 3.10 without installing anything, so every import in it,
at any depth (functions and TYPE_CHECKING blocks included), names the standard library or imagecontract itself.

Issue 30: the serve guard (starlette, uvicorn) used to live here; it is image-side serving code and moved to
smoke/serve_guard.py, the image-side package that may use what the image has (torch, the runtime's packages)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Standard library in a Python newer than this one's, imported behind a guard that falls back when absent.
NEWER_STDLIB = {"compression"}  # Python 3.14 (compression.zstd), imagecontract/codeobjects.py


def _foreign_imports(root: Path) -> list[str]:
    """'path:line: module' for every import under root that is neither the standard library nor imagecontract."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in NEWER_STDLIB and top != "imagecontract":
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name}")
    return found


def test_imagecontract_imports_only_the_standard_library() -> None:
    assert _foreign_imports(REPO / "imagecontract") == []


def test_the_rule_catches_a_third_party_import_even_inside_a_function(tmp_path: Path) -> None:
    package = tmp_path / "imagecontract"
    package.mkdir()
    (package / "ok.py").write_text("import json\nfrom imagecontract import blob\nfrom . import targets\n")
    (package / "guard.py").write_text("import os\n\n\ndef app():\n    from starlette.routing import Route\n")
    assert _foreign_imports(package) == ["imagecontract/guard.py:5: starlette.routing"]


def test_the_serve_guard_lives_image_side_not_in_the_contract_package() -> None:
    assert not (REPO / "imagecontract" / "serve_guard.py").exists()
    assert "from starlette" in (REPO / "smoke" / "serve_guard.py").read_text(encoding="utf-8")
