"""Reading matrix.yaml: a bounded YAML loader (size, depth, alias bombs, merge keys) that keeps the line and
column of every key and value, so each later error can name file:line:column and the key path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from imagebuild.errors import ConfigError
from imagebuild.matrix.fields import excerpt

KeyPath = tuple[str | int, ...]


class _Positions:
    """Line/column of every key and value in the YAML file, by key path."""

    def __init__(self) -> None:
        self.keys: dict[KeyPath, yaml.Mark] = {}
        self.values: dict[KeyPath, yaml.Mark] = {}

    def find(self, path: KeyPath, prefer_key: bool = False) -> yaml.Mark | None:
        for end in range(len(path), -1, -1):
            sub = path[:end]
            first, second = (self.keys, self.values) if prefer_key or end < len(path) else (self.values, self.keys)
            mark = first.get(sub) or second.get(sub)
            if mark is not None:
                return mark
        return None


# Limits that keep a hostile matrix cheap to refuse; the real matrix is about 10 KB, under 1,000 nodes, 7 deep.
MAX_MATRIX_BYTES = 1 << 20
MAX_NODES = 100_000  # nodes of the tree once aliases are expanded
MAX_DEPTH = 64  # nesting, also once aliases are expanded
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _where(file: Path, mark: yaml.Mark | None) -> str:
    return f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses nesting beyond MAX_DEPTH before recursing into it (PyYAML composes
    recursively: ~500 levels would overflow Python's stack)."""

    def __init__(self, stream: str, file: Path) -> None:
        super().__init__(stream)
        self.file = file
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                # types-PyYAML leaves Parser.peek_event unannotated (yaml-stubs/parser.pyi)
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ConfigError(f"{_where(self.file, mark)}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _check_expansion(root: yaml.Node, file: Path) -> None:
    """Refuse alias bombs and alias cycles before anything is built: the expanded tree is measured on the
    node graph, each node once, so a 1 KB file that expands to billions of nodes costs microseconds."""
    measured: dict[int, tuple[int, int]] = {}  # node -> (nodes, height) of its expansion
    active: set[int] = set()

    def measure(node: yaml.Node, level: int) -> int:
        key = id(node)
        nodes, height = measured.get(key, (0, 0))
        if level + height > MAX_DEPTH:
            raise ConfigError(f"{_where(file, node.start_mark)}: nested deeper than {MAX_DEPTH} levels through aliases")
        if nodes:
            return nodes
        if key in active:
            raise ConfigError(f"{_where(file, node.start_mark)}: an alias refers to a node that contains it")
        active.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        total = 1
        for child in children:
            total += measure(child, level + 1)
            height = max(height, measured[id(child)][1] + 1)
            if total > MAX_NODES:
                raise ConfigError(
                    f"{_where(file, node.start_mark)}: expands to more than {MAX_NODES} nodes through aliases",
                    hint="an alias bomb? write the values out or use fewer nested aliases",
                )
        active.discard(key)
        measured[key] = (total, height)
        return total

    measure(root, 0)


def _construct(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, file: Path) -> Any:
    try:
        return loader.construct_object(node)
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp with month 13
        raise _located_error(file, node.start_mark, path, f"cannot read this value: {exc}") from None


def _pairs(loader: yaml.SafeLoader, node: yaml.MappingNode, path: KeyPath, file: Path) -> list[Any]:
    """(key, key node, value node) of a mapping, merge keys (`<<`) applied as YAML defines them: a key
    written in the mapping overrides a merged one, and an earlier merged mapping wins over a later one.
    Only keys written twice in the same mapping are duplicates."""
    own: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    merged: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise _located_error(
                        file, source.start_mark, path, "a merge key (<<) takes a mapping or a list of mappings"
                    )
                for key, k_node, v_node in _pairs(loader, source, path, file):
                    merged.setdefault(key, (k_node, v_node))
            continue
        key = _construct(loader, key_node, path, file)
        if not isinstance(key, str | int | float | bool) or key is None:
            raise _located_error(file, key_node.start_mark, path, "mapping keys must be plain scalars")
        key = str(key)
        if key in own:
            raise _located_error(file, key_node.start_mark, (*path, key), f"duplicate key '{key}'")
        own[key] = (key_node, value_node)
    combined = {**merged, **own}
    return [(key, *nodes) for key, nodes in combined.items()]


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, pos: _Positions, file: Path) -> Any:
    pos.values[path] = node.start_mark
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key, key_node, value_node in _pairs(loader, node, path, file):
            pos.keys[(*path, key)] = key_node.start_mark
            result[key] = _build(loader, value_node, (*path, key), pos, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), pos, file) for i, item in enumerate(node.value)]
    return _construct(loader, node, path, file)


def format_path(path: KeyPath) -> str:
    """`torch.2.3.builds.rocm.patches[0]`; a key that is not a plain name is quoted (and cut short), so a hostile
    key cannot spread an error over lines or screens."""
    text = ""
    for part in path:
        if isinstance(part, str) and not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", part):
            part = excerpt(part)
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _located_error(file: Path, mark: yaml.Mark | None, path: KeyPath, message: str) -> ConfigError:
    where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
    return ConfigError(f"{where}: {format_path(path)}: {message}")


def parse_text(text: str, path: Path) -> tuple[Any, _Positions]:
    """The data of matrix text and the line/column of each key and value, bounded (size, depth, aliases)."""
    if len(text) > MAX_MATRIX_BYTES:
        raise ConfigError(f"{path}: the matrix is larger than {MAX_MATRIX_BYTES} bytes")
    loader: _BoundedLoader | None = None
    pos = _Positions()
    try:
        loader = _BoundedLoader(text, path)  # its reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(f"{path}: the matrix file is empty")
        _check_expansion(node, path)
        data = _build(loader, node, (), pos, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:  # the reader's errors (control characters, bad encoding) carry an offset
        offset = getattr(exc, "position", 0) or 0
        line, column = text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1
        reason = getattr(exc, "reason", None) or type(exc).__name__
        character = getattr(exc, "character", None)
        shown = f" (character {character:#x})" if isinstance(character, int) else ""
        raise ConfigError(f"{path}:{line}:{column}: invalid YAML: {reason}{shown}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, pos
