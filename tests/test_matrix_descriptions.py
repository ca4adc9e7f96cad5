"""matrix.yaml users get hover text: every field of the schema has a description, in the committed copy too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from imagebuild.matrix import json_schema

REPO = Path(__file__).resolve().parents[1]


def undescribed(schema: dict[str, Any]) -> list[str]:
    found = []
    for name, model in {"MatrixModel": schema, **schema.get("$defs", {})}.items():
        for field, spec in (model.get("properties") or {}).items():
            if not str(spec.get("description", "")).strip():
                found.append(f"{name}.{field}")
    return found


def test_every_matrix_field_has_a_description() -> None:
    assert undescribed(json_schema()) == []


def test_the_committed_schema_carries_the_descriptions() -> None:
    committed = json.loads((REPO / "schema" / "matrix.schema.json").read_text())
    assert undescribed(committed) == []
    platform = committed["$defs"]["Platform"]["properties"]
    assert "--arch" in platform["default_arches"]["description"]
