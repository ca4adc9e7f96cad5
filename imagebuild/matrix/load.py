"""The loaded matrix: parse (loader.py), validate the models (models.py, errors located by located.py), cross-check
and expand the targets (targets.py).
"""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from imagebuild.errors import ConfigError
from imagebuild.matrix.checks import check_runtime_limits, check_size_budgets, locator
from imagebuild.matrix.loader import MAX_MATRIX_BYTES, _Positions, parse_text
from imagebuild.matrix.located import _describe_validation
from imagebuild.matrix.models import MatrixModel
from imagebuild.matrix.pins import Unpinned, unpinned
from imagebuild.matrix.targets import Target, _check_references
from imagecontract.blob import UnreadableFile, read_bounded


class Matrix:
    """A loaded, cross-checked matrix and its expanded targets."""

    def __init__(self, model: MatrixModel, path: Path, sha256: str, targets: list[Target]) -> None:
        self.model = model
        self.path = path
        self.sha256 = sha256
        self.targets = targets

    def target(self, name: str) -> Target:
        for target in self.targets:
            if target.name == name:
                return target
        names = [t.name for t in self.targets]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"targets: {', '.join(names)}"
        raise ConfigError(f"unknown target '{name}'", hint=hint)

    def select(self, names: tuple[str, ...] | list[str]) -> list[Target]:
        return [self.target(n) for n in names] if names else list(self.targets)

    def unpinned(self) -> list[Unpinned]:
        """Every source, patch and base image that is not pinned by digest, commit or checksum."""
        return unpinned(self.model)


def load_text(text: str, path: Path) -> Matrix:
    """Parse and validate matrix text; every problem is a ConfigError naming file:line:column."""
    data, pos = parse_text(text, path)
    return validate(data, pos, path, hashlib.sha256(text.encode()).hexdigest())


def validate(data: Any, pos: _Positions, path: Path, sha256: str) -> Matrix:
    """Validate parsed matrix data (values and where each stands in `path`): the models, then the cross-checks."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1:1: the matrix must be a mapping of sections (platforms, torch, ...)")
    try:
        model = MatrixModel.model_validate(data)
    except ValidationError as exc:
        raise _describe_validation(exc, pos, path) from None
    targets = _check_references(model, pos, path)
    fail = locator(path, pos)  # references to the expanded targets, and from the runtimes' serve argv
    check_size_budgets(model, [t.name for t in targets], fail)
    check_runtime_limits(model, fail)
    return Matrix(model, path, sha256, targets)


def load_matrix(path: Path) -> Matrix:
    """Load matrix.yaml (or another path); a missing or unreadable file is a ConfigError."""
    try:
        # bounded, and opened without blocking: a FIFO or a device is refused (issue 34), a huge file not read whole
        raw = read_bounded(path, MAX_MATRIX_BYTES + 1)
        if len(raw) > MAX_MATRIX_BYTES:
            raise ConfigError(f"{path}: the matrix is larger than {MAX_MATRIX_BYTES} bytes")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such matrix file", hint="pass --matrix PATH or run from the repository root"
        ) from None
    except UnreadableFile as exc:
        raise ConfigError(f"{path}: cannot read the matrix: {exc.strerror}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the matrix: {exc}") from None
    return load_text(text, path)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of matrix.yaml (the committed copy is schema/matrix.schema.json)."""
    return MatrixModel.model_json_schema()
